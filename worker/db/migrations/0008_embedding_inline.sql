-- Keep each post's vector in the heap tuple, not in TOAST (issue 18). A 1024-d halfvec is 2,052 bytes,
-- just over the 2 KB at which PostgreSQL moves a column out of line by default (EXTENDED): every vector
-- then cost a TOAST index lookup and two chunk reads whenever the row was read. The binary-quantized
-- recall re-ranks hundreds of rows a query, and that was most of its time (docs/performance.md,
-- "Recall at scale"). MAIN keeps the column inline unless the row would not fit in a page at all, so
-- big dimensions still work. Applies to rows written from now on; `VACUUM FULL post_index` (or a
-- reindex) moves the existing ones.
ALTER TABLE post_index ALTER COLUMN embedding SET STORAGE MAIN;
