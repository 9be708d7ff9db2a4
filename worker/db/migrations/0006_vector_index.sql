-- Which vector index post_index carries (issue 18): 'halfvec' (HNSW over the halfvec column, the one
-- 0001 built) or 'binary' (HNSW over binary_quantize(embedding)::bit(D), re-ranked by the exact cosine).
-- `citebot db migrate` builds the kind CITEBOT_RETRIEVAL__VECTOR_INDEX names and records it here; every
-- process that reads the index checks it (worker/db/vector_index.py).
ALTER TABLE index_meta ADD COLUMN IF NOT EXISTS vector_index text NOT NULL DEFAULT 'halfvec'
    CHECK (vector_index IN ('halfvec', 'binary'));
