-- The halfvec HNSW graph is m = 24, ef_construction = 128 since issue 18's fourth session
-- (worker.db.vector_index.HNSW_WITH): at 425k posts it finds recall@25 0.99 at ef_search 40, the new
-- default, where the m = 16, ef_construction = 64 graph of 0001 needed 200 for 0.97. An empty index is
-- rebuilt with it here (instant). One that holds posts keeps its graph: rebuilding it takes the build
-- time of docs/operations.md, "Sizing the index", so the operator chooses when, and until then the
-- worker keeps ef_search 200 for it (PostgresPostIndex.check).
DO $$
BEGIN
    IF to_regclass('post_index_embedding_hnsw') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM post_index) THEN
        DROP INDEX post_index_embedding_hnsw;
        CREATE INDEX post_index_embedding_hnsw ON post_index
            USING hnsw (embedding halfvec_cosine_ops) WITH (m = 24, ef_construction = 128);
    END IF;
END
$$;
