-- Per-source ownership of indexed posts (issue 16). The source that last read a post owns its row, and
-- a backfill's range sweep removes only rows it owns (`citebot backfill --prune`: any row in the
-- range). The live forum is one owner, 'forum' (the db and api sources and the webhook events); each
-- export folder is its own ('file:<path>'). Rows written before this migration belong to the forum.
ALTER TABLE post_index ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT 'forum';
