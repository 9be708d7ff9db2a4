-- Lexical channel (issue 19): full-text search over citebot's own index, in PostgreSQL.
-- The topic title is weighted A, the post's own text B (the backfill's title/category/tags head is
-- left out, so the title is not counted twice); English stemming. A stored generated column: every
-- writer of post_index (backfill, incremental indexer) fills it without knowing it exists. Adding it
-- rewrites the table once (about 2 s per 10,000 posts on a busy 2-core machine).
ALTER TABLE post_index ADD COLUMN lexical tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', topic_title), 'A')
    || setweight(to_tsvector('english',
           CASE WHEN starts_with(text, btrim(topic_title)) AND strpos(text, E'\n\n') > 0
                THEN substr(text, strpos(text, E'\n\n') + 2)
                ELSE text END), 'B')
) STORED;
CREATE INDEX post_index_lexical_gin ON post_index USING gin (lexical);
