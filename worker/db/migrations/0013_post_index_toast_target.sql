-- Write post_index rows as they are, uncompressed, up to a full page (issue 33, finding 7). Since 0008
-- keeps each 1024-d vector inline (2,052 bytes), every row is over the 2 KB at which PostgreSQL starts
-- toasting, and each insert pglz-compressed the text, the lexical tsvector and then the vector (which
-- does not compress) before writing the row: about a fifth of the database's time per backfilled post.
-- With the target at a page (8,160 bytes, the highest PostgreSQL allows), a row that fits a page is
-- stored uncompressed; a larger one (a long post with a big vector) is still compressed and moved out
-- of line as before. Applies to rows written from now on; the table grows by what pglz saved on text.
ALTER TABLE post_index SET (toast_tuple_target = 8160);
