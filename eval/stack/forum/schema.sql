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

CREATE SEQUENCE IF NOT EXISTS forum.post_ids;
CREATE SEQUENCE IF NOT EXISTS forum.topic_ids;
CREATE SEQUENCE IF NOT EXISTS forum.user_ids;
