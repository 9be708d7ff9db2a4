-- The second bi-encoder's column (issue 19): one vector per indexed post, of the excerpt the second
-- stage reads (`worker.retrieval.rerank.rerank_text`: the topic title and the post's first characters),
-- made by a second embedding model (CITEBOT_EXCERPT_EMBEDDINGS__*). A side table, not a column of
-- post_index: its model and dimension are not the recall model's, it is filled by its own resumable pass
-- (`backfill/excerpts.py`), and a post without a row simply lacks the feature. `digest` is the sha256 of
-- the excerpt text, so that a changed title or post start is embedded again and nothing else is.
-- Only ever read by post id (the candidates of one question): no vector index, any dimension.
ALTER TABLE index_meta
    ADD COLUMN excerpt_model text,
    ADD COLUMN excerpt_dimension integer CHECK (excerpt_dimension > 0);

CREATE TABLE excerpt_vectors (
    post_id    bigint      PRIMARY KEY,
    digest     bytea       NOT NULL,
    embedding  vector      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
