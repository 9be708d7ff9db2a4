-- The subset of Discourse's schema (db/schema as of Discourse 3.x) that the `db` source reads, with
-- Discourse's own column names and types. Columns the source does not read are mostly omitted;
-- a few are kept (NOT NULL ones with defaults) so that inserts look like Discourse's.
CREATE TABLE users (
    id              serial PRIMARY KEY,
    username        character varying(60) NOT NULL,
    username_lower  character varying(60) NOT NULL,
    created_at      timestamp without time zone NOT NULL DEFAULT now(),
    updated_at      timestamp without time zone NOT NULL DEFAULT now()
);

CREATE TABLE categories (
    id                  serial PRIMARY KEY,
    name                character varying(50) NOT NULL,
    slug                character varying NOT NULL,
    read_restricted     boolean NOT NULL DEFAULT false,
    parent_category_id  integer,
    topic_id            integer,
    created_at          timestamp without time zone NOT NULL DEFAULT now(),
    updated_at          timestamp without time zone NOT NULL DEFAULT now()
);

CREATE TABLE topics (
    id           serial PRIMARY KEY,
    title        character varying NOT NULL,
    slug         character varying,
    category_id  integer,
    archetype    character varying NOT NULL DEFAULT 'regular',
    visible      boolean NOT NULL DEFAULT true,
    closed       boolean NOT NULL DEFAULT false,
    archived     boolean NOT NULL DEFAULT false,
    deleted_at   timestamp without time zone,
    user_id      integer,
    posts_count  integer NOT NULL DEFAULT 0,
    created_at   timestamp without time zone NOT NULL DEFAULT now(),
    updated_at   timestamp without time zone NOT NULL DEFAULT now()
);

CREATE TABLE posts (
    id                    serial PRIMARY KEY,
    user_id               integer,
    topic_id              integer NOT NULL,
    post_number           integer NOT NULL,
    raw                   text NOT NULL,
    cooked                text NOT NULL,
    post_type             integer NOT NULL DEFAULT 1,
    reply_to_post_number  integer,
    hidden                boolean NOT NULL DEFAULT false,
    hidden_reason_id      integer,
    user_deleted          boolean NOT NULL DEFAULT false,
    deleted_at            timestamp without time zone,
    version               integer NOT NULL DEFAULT 1,
    created_at            timestamp without time zone NOT NULL DEFAULT now(),
    updated_at            timestamp without time zone NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX index_posts_on_topic_id_and_post_number ON posts (topic_id, post_number);

CREATE TABLE tags (
    id          serial PRIMARY KEY,
    name        character varying NOT NULL,
    created_at  timestamp without time zone NOT NULL DEFAULT now(),
    updated_at  timestamp without time zone NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX index_tags_on_name ON tags (name);

CREATE TABLE topic_tags (
    id          serial PRIMARY KEY,
    topic_id    integer NOT NULL,
    tag_id      integer NOT NULL,
    created_at  timestamp without time zone NOT NULL DEFAULT now(),
    updated_at  timestamp without time zone NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX index_topic_tags_on_topic_id_and_tag_id ON topic_tags (topic_id, tag_id);

-- Tag groups and who may see their tags (DiscourseTagging.visible_tags reads these; group 0 is
-- everyone). A tag in a group that lists only staff (group 3) is hidden from anonymous readers.
CREATE TABLE tag_groups (
    id             serial PRIMARY KEY,
    name           character varying NOT NULL,
    parent_tag_id  integer,
    one_per_topic  boolean DEFAULT false,
    created_at     timestamp without time zone NOT NULL DEFAULT now(),
    updated_at     timestamp without time zone NOT NULL DEFAULT now()
);

CREATE TABLE tag_group_memberships (
    id            serial PRIMARY KEY,
    tag_id        integer NOT NULL,
    tag_group_id  integer NOT NULL,
    created_at    timestamp without time zone NOT NULL DEFAULT now(),
    updated_at    timestamp without time zone NOT NULL DEFAULT now()
);

CREATE TABLE tag_group_permissions (
    id               bigserial PRIMARY KEY,
    tag_group_id     bigint NOT NULL,
    group_id         bigint NOT NULL,
    permission_type  integer NOT NULL DEFAULT 1,
    created_at       timestamp without time zone NOT NULL DEFAULT now(),
    updated_at       timestamp without time zone NOT NULL DEFAULT now()
);
