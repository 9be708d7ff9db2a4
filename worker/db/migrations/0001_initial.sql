-- citebot schema, version 1.
-- {{dimension}} is replaced at migrate time by CITEBOT_EMBEDDINGS__DIMENSION; index_meta records it
-- together with the model, and every process checks both before it reads or writes a vector.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE index_meta (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    model       text        NOT NULL,
    dimension   integer     NOT NULL CHECK (dimension > 0),
    strategy    text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per eligible forum post (post grain). Ineligible posts are never written; the
-- restricted-category list is re-checked at query time because categories change after indexing.
CREATE TABLE post_index (
    post_id              bigint      PRIMARY KEY,
    topic_id             bigint      NOT NULL,
    post_number          integer     NOT NULL,
    topic_slug           text        NOT NULL,
    topic_title          text        NOT NULL,
    category_id          bigint,
    tags                 text[]      NOT NULL DEFAULT '{}',
    post_type            smallint    NOT NULL DEFAULT 1,
    reply_to_post_number integer,
    username             text,
    text                 text        NOT NULL,
    digest               bytea       NOT NULL,
    model                text        NOT NULL,
    embedding            halfvec({{dimension}}) NOT NULL,
    source_updated_at    timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX post_index_topic_idx ON post_index (topic_id, post_number);
CREATE INDEX post_index_category_idx ON post_index (category_id);
CREATE INDEX post_index_embedding_hnsw ON post_index
    USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64);

-- Categories members cannot all read, as last seen on the forum; recall excludes them.
CREATE TABLE restricted_categories (
    category_id bigint      PRIMARY KEY,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per question post: the unit of exactly-once. The UNIQUE post_id is what stops a
-- redelivered message or a second webhook from producing a second reply.
CREATE TABLE answers (
    id             bigserial   PRIMARY KEY,
    post_id        bigint      NOT NULL UNIQUE,
    topic_id       bigint      NOT NULL,
    post_number    integer,
    post_version   integer,
    user_id        bigint,
    username       text,
    state          text        NOT NULL DEFAULT 'queued' CHECK (state IN
                      ('queued', 'retrieved', 'generated', 'posted', 'abstained', 'refused',
                       'failed', 'skipped')),
    zone           text        CHECK (zone IN ('abstain', 'weak', 'normal')),
    rule_id        text,
    sources        jsonb       NOT NULL DEFAULT '[]',
    reply_raw      text,
    reply_post_id  bigint,
    trace          jsonb       NOT NULL DEFAULT '{}',
    attempts       integer     NOT NULL DEFAULT 0,
    error          text,
    enqueued_by    text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    posted_at      timestamptz
);
CREATE INDEX answers_state_idx ON answers (state, updated_at);
CREATE INDEX answers_topic_idx ON answers (topic_id, created_at);
CREATE INDEX answers_user_idx ON answers (user_id, created_at);

-- Checkpoints of backfill runs, one row per source (db, api, file:<path>).
CREATE TABLE backfill_state (
    source       text        PRIMARY KEY,
    cursor       jsonb       NOT NULL DEFAULT '{}',
    status       text        NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'running', 'done', 'failed')),
    model        text,
    stats        jsonb       NOT NULL DEFAULT '{}',
    started_at   timestamptz,
    finished_at  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
