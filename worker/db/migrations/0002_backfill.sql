-- Backfill (issue 7): category names as last seen by a backfill source, so that the incremental
-- updates (webhooks: post_edited, topic_edited, …) compose exactly the text the backfill composed,
-- and an unchanged post keeps its digest. Discourse's webhook payloads carry category ids only.
CREATE TABLE category_names (
    category_id bigint      PRIMARY KEY,
    name        text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
