"""Filling the second bi-encoder's column (``excerpt_vectors``) from the post index.

A pass of its own over ``post_index`` in post-id order, a page at a time: each row's excerpt
(``worker.retrieval.excerpts.excerpt_of``: the cross-encoder's title + post start) is hashed, and only
rows whose hash differs from the one stored (new posts, changed titles or starts) are embedded with
the second model and upserted, each page in its own transaction. So the pass is resumable by
construction: an interrupted run keeps its finished pages, a later run embeds only what is missing,
and a run over an unchanged index embeds nothing. Rows of posts that left the index are deleted at the
end of a full pass. The model and dimension are recorded in ``index_meta`` on the first fill; another
model's vectors are never mixed in (``reset`` empties the column for a new model).

``citebot backfill`` runs it after the post pass when ``CITEBOT_EXCERPT_EMBEDDINGS__MODEL`` is set
(and alone with ``--excerpts``); the incremental refresh writes the rows of the posts it re-embeds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import psycopg
from pgvector import Vector

from backfill.embedding import DEFAULT_RETRY, EmbedResult, embed_batch
from backfill.lock import BackfillLock
from backfill.progress import Progress
from worker.db.connect import connect
from worker.protocols import Embedder
from worker.retrieval.excerpts import check_excerpt_meta, excerpt_of, read_excerpt_meta
from worker.retry import RetryPolicy
from worker.settings import DatabaseSettings

log = logging.getLogger(__name__)
LOCK_KEY = "excerpts"

_PAGE_SQL = """
SELECT p.post_id, p.topic_title, p.text, e.digest
FROM post_index p LEFT JOIN excerpt_vectors e USING (post_id)
WHERE p.post_id > %(after)s AND (%(ids)s::bigint[] IS NULL OR p.post_id = ANY(%(ids)s::bigint[]))
ORDER BY p.post_id
LIMIT %(n)s
"""
_UPSERT_SQL = """
INSERT INTO excerpt_vectors (post_id, digest, embedding) VALUES (%s, %s, %s)
ON CONFLICT (post_id) DO UPDATE SET digest = EXCLUDED.digest, embedding = EXCLUDED.embedding,
                                    updated_at = now()
"""
_ORPHANS_SQL = """
DELETE FROM excerpt_vectors e WHERE NOT EXISTS (SELECT 1 FROM post_index p WHERE p.post_id = e.post_id)
"""


@dataclass(frozen=True, slots=True)
class ExcerptSummary:
    """What one pass did: rows read, embedded, unchanged, failed, and orphans removed."""

    model: str
    seen: int
    embedded: int
    skipped: int
    failed: int
    removed: int
    duration_s: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        rate = self.embedded / self.duration_s if self.duration_s > 0 else 0.0
        return (
            f"excerpts ({self.model}): seen {self.seen}, embedded {self.embedded} ({rate:.1f}/s), "
            f"skipped {self.skipped} (unchanged), failed {self.failed}, removed {self.removed}; "
            f"{self.duration_s:.1f} s"
        )


def record_excerpt_model(conn: psycopg.Connection, embedder: Embedder, *, reset: bool = False) -> None:
    """Record the second model in ``index_meta`` (emptying the column first when ``reset``); raise
    ``IndexMismatchError`` when the column holds another model's vectors and ``reset`` is off."""
    with conn.transaction():
        if reset:
            conn.execute("TRUNCATE excerpt_vectors")
        else:
            check_excerpt_meta(conn, embedder.model, embedder.dimension)
        if reset or read_excerpt_meta(conn) is None:
            conn.execute(
                "UPDATE index_meta SET excerpt_model = %s, excerpt_dimension = %s, updated_at = now()",
                (embedder.model, embedder.dimension),
            )


def write_excerpts(
    conn: psycopg.Connection,
    embedder: Embedder,
    rows: Sequence[tuple[int, str, str]],
    *,
    excerpt_chars: int = 300,
    batch_size: int = 32,
    pool: ThreadPoolExecutor | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, int]:
    """Embed and upsert the excerpts of ``rows`` (post id, topic title, text) in one transaction;
    (embedded, failed). A text the model refuses is counted and left without a row."""
    if not rows:
        return 0, 0
    excerpts = [excerpt_of(title, text, excerpt_chars) for _pid, title, text in rows]
    batches = [list(range(i, min(i + batch_size, len(rows)))) for i in range(0, len(rows), batch_size)]

    def embed(idx: list[int]) -> EmbedResult:
        return embed_batch(embedder, [excerpts[i][0] for i in idx], policy=retry, sleep=sleep)

    results = list(pool.map(embed, batches)) if pool is not None else [embed(b) for b in batches]
    params = []
    failed = 0
    for idx, result in zip(batches, results, strict=True):
        failed += result.failed
        for j, vec in zip(result.ok, result.vectors, strict=True):
            i = idx[j]
            params.append((rows[i][0], excerpts[i][1], Vector(vec)))
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(_UPSERT_SQL, params)
    return len(params), failed


def fill_excerpts(
    database: DatabaseSettings,
    embedder: Embedder,
    *,
    excerpt_chars: int = 300,
    batch_size: int = 32,
    concurrency: int = 1,
    page_size: int = 1000,
    limit: int | None = None,
    post_ids: Sequence[int] | None = None,
    reset: bool = False,
    progress: bool | None = False,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> ExcerptSummary:
    """Fill ``excerpt_vectors`` for every indexed post (or ``post_ids``) whose excerpt changed or has no
    row; ``limit`` caps the rows embedded (a measured sample, a test). Resumable: see the module."""
    start = time.perf_counter()
    seen = embedded = skipped = failed = removed = 0
    with BackfillLock(database.url, LOCK_KEY, exclusive=False), connect(database) as conn:
        record_excerpt_model(conn, embedder, reset=reset)
        with conn.transaction():
            row = conn.execute(
                "SELECT count(*) FROM post_index p LEFT JOIN excerpt_vectors e USING (post_id) "
                "WHERE e.post_id IS NULL"
            ).fetchone()
        missing = int(row[0]) if row else 0
        total = missing if limit is None else min(limit, missing)
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="excerpt-embed")
        after = 0
        ids = sorted(set(post_ids)) if post_ids is not None else None
        try:
            with Progress(total, interactive=progress, label="excerpts") as bar:
                while limit is None or embedded + failed < limit:
                    with conn.transaction():
                        page = conn.execute(
                            _PAGE_SQL, {"after": after, "ids": ids, "n": page_size}
                        ).fetchall()
                    if not page:
                        break
                    after = int(page[-1][0])
                    todo = []
                    for pid, title, text, digest in page:
                        seen += 1
                        if digest is not None and bytes(digest) == excerpt_of(title, text, excerpt_chars)[1]:
                            skipped += 1
                        else:
                            todo.append((int(pid), str(title), str(text)))
                    if limit is not None:
                        todo = todo[: limit - embedded - failed]
                    done, bad = write_excerpts(
                        conn,
                        embedder,
                        todo,
                        excerpt_chars=excerpt_chars,
                        batch_size=batch_size,
                        pool=pool,
                        retry=retry,
                        sleep=sleep,
                    )
                    embedded += done
                    failed += bad
                    bar.advance(len(todo), embedded=done)
            if ids is None and limit is None:
                with conn.transaction():
                    removed = conn.execute(_ORPHANS_SQL).rowcount
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    summary = ExcerptSummary(
        embedder.model, seen, embedded, skipped, failed, removed, round(time.perf_counter() - start, 3)
    )
    log.info("%s", summary.line())
    return summary
