-- The local forum's own schema; it never touches citebot's tables.
CREATE SCHEMA IF NOT EXISTS forum;

CREATE TABLE IF NOT EXISTS forum.meta (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    export     text    NOT NULL,
    topics     integer NOT NULL,
    posts      integer NOT NULL,
    loaded_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS forum.users (
    id        bigint PRIMARY KEY,
    username  text   NOT NULL,
    admin     boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX IF NOT EXISTS users_username_idx ON forum.users (lower(username));

CREATE TABLE IF NOT EXISTS forum.topics (
    id                  bigint PRIMARY KEY,
    title               text   NOT NULL,
    slug                text   NOT NULL,
    category_id         bigint,
    archetype           text   NOT NULL DEFAULT 'regular',
    visible             boolean NOT NULL DEFAULT true,
    closed              boolean NOT NULL DEFAULT false,
    archived            boolean NOT NULL DEFAULT false,
    deleted_at          timestamptz,
    tags                text[] NOT NULL DEFAULT '{}',
    user_id             bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    allowed_user_ids    bigint[] NOT NULL DEFAULT '{}'
);

CREATE TABLE IF NOT EXISTS forum.posts (
    id                    bigint PRIMARY KEY,
    topic_id              bigint  NOT NULL,
    post_number           integer NOT NULL,
    user_id               bigint  NOT NULL,
    username              text    NOT NULL,
    raw                   text    NOT NULL DEFAULT '',
    cooked                text    NOT NULL DEFAULT '',
    plain                 text    NOT NULL DEFAULT '',
    post_type             smallint NOT NULL DEFAULT 1,
    reply_to_post_number  integer,
    version               integer NOT NULL DEFAULT 1,
    hidden                boolean NOT NULL DEFAULT false,
    deleted_at            timestamptz,
    user_deleted          boolean NOT NULL DEFAULT false,
    accepted_answer       boolean NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    search_data           tsvector,
    UNIQUE (topic_id, post_number)
);
CREATE INDEX IF NOT EXISTS posts_search_idx ON forum.posts USING gin (search_data);

CREATE TABLE IF NOT EXISTS forum.notifications (
    id                 bigserial PRIMARY KEY,
    user_id            bigint  NOT NULL,
    notification_type  integer NOT NULL,
    topic_id           bigint  NOT NULL,
    post_number        integer NOT NULL,
    post_id            bigint  NOT NULL,
    data               jsonb   NOT NULL DEFAULT '{}',
    read               boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS notifications_user_idx ON forum.notifications (user_id, id DESC);

CREATE TABLE IF NOT EXISTS forum.site_settings (
    name     text PRIMARY KEY,
    type     text NOT NULL,
    value    text NOT NULL,
    default_value text NOT NULL,
    description text NOT NULL DEFAULT ''
);
ALTER TABLE forum.site_settings ADD COLUMN IF NOT EXISTS category text NOT NULL DEFAULT 'plugins';
ALTER TABLE forum.site_settings ADD COLUMN IF NOT EXISTS plugin text;

-- Permissions and moderation (Guardian's inputs). ALTERs keep a database loaded by an older double usable.
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS moderator boolean NOT NULL DEFAULT false;
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS trust_level smallint NOT NULL DEFAULT 1;
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS groups text[] NOT NULL DEFAULT '{}';
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS silenced_till timestamptz;
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS suspended_till timestamptz;
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS staged boolean NOT NULL DEFAULT false;
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS anonymized boolean NOT NULL DEFAULT false;
-- NULL: the site's default sidebar (ForumConfig.sidebar_category_ids)
ALTER TABLE forum.users ADD COLUMN IF NOT EXISTS sidebar_category_ids bigint[];
-- Post#like_count: served in a post's actions_summary (id 2) and search's like_count.
ALTER TABLE forum.posts ADD COLUMN IF NOT EXISTS like_count integer NOT NULL DEFAULT 0;

-- Custom groups get ids here; the automatic groups have Discourse's fixed ids (guardian.AUTO_GROUPS).
CREATE TABLE IF NOT EXISTS forum.groups (
    id    bigint PRIMARY KEY,
    name  text   NOT NULL UNIQUE
);
CREATE SEQUENCE IF NOT EXISTS forum.group_ids START 100;

-- permissions: {group name: permission type (1 full, 2 create_post, 3 readonly)}; {} on a public
-- category means everyone/full (Category.resolve_permissions keeps no rows then).
CREATE TABLE IF NOT EXISTS forum.categories (
    id                  bigint PRIMARY KEY,
    name                text    NOT NULL,
    slug                text    NOT NULL,
    parent_category_id  bigint,
    read_restricted     boolean NOT NULL DEFAULT false,
    permissions         jsonb   NOT NULL DEFAULT '{}',
    description         text,
    color               text    NOT NULL DEFAULT '0088CC',
    text_color          text    NOT NULL DEFAULT 'FFFFFF',
    position            integer NOT NULL DEFAULT 0
);
CREATE SEQUENCE IF NOT EXISTS forum.category_ids START 1000;

ALTER TABLE forum.posts ADD COLUMN IF NOT EXISTS action_code text;
ALTER TABLE forum.posts ADD COLUMN IF NOT EXISTS hidden_at timestamptz;
ALTER TABLE forum.posts ADD COLUMN IF NOT EXISTS hidden_reason_id integer;
ALTER TABLE forum.topics ADD COLUMN IF NOT EXISTS visibility_reason_id integer;

-- ReviewableFlaggedPost rows made by the hide control (status 0 pending, 1 approved, 2 rejected).
CREATE TABLE IF NOT EXISTS forum.reviewables (
    id                    bigserial PRIMARY KEY,
    post_id               bigint   NOT NULL,
    topic_id              bigint   NOT NULL,
    category_id           bigint,
    created_by_id         bigint   NOT NULL,
    target_created_by_id  bigint,
    status                smallint NOT NULL DEFAULT 0,
    score                 real     NOT NULL DEFAULT 0,
    version               integer  NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT now()
);

CREATE SEQUENCE IF NOT EXISTS forum.post_ids;
CREATE SEQUENCE IF NOT EXISTS forum.topic_ids;
CREATE SEQUENCE IF NOT EXISTS forum.user_ids;
