"""The second bi-encoder's column: each post's excerpt vector, read by candidate id at query time.

The cross-encoder reads a post as its topic title and the post's first characters
(``worker.retrieval.rerank.rerank_text``). A second, stronger bi-encoder (all-mpnet-base-v2 in the
issue-19 study) embeds exactly that excerpt once, at backfill time (``backfill/excerpts.py``), into
``excerpt_vectors``; its model and dimension are recorded in ``index_meta.excerpt_model`` /
``excerpt_dimension``. At query time the question is embedded once with the second model and the
candidates' cosines are one SQL query over their ids — no scan, no index — and become the second
stage's ``excerpt_cosine`` feature. A post without a row (not yet filled) gets no value, and the stage
gives it the feature's mean (``worker.retrieval.stage``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np
import psycopg
from pgvector import Vector

from worker.db.boundary import database_errors
from worker.errors import ConfigError, IndexMismatchError
from worker.retrieval.recall import ConnectionSource
from worker.retrieval.rerank import rerank_text

EXCERPT_COSINES_SQL = """
SELECT e.post_id, 1 - (e.embedding <=> %(q)s) AS cosine
FROM excerpt_vectors e
WHERE e.post_id = ANY(%(ids)s::bigint[])
"""


def excerpt_of(title: str, text: str, excerpt_chars: int = 300) -> tuple[str, bytes]:
    """The excerpt the second model embeds (the cross-encoder's, one definition) and its sha256."""
    excerpt = rerank_text(title, text, excerpt_chars)
    return excerpt, hashlib.sha256(excerpt.encode("utf-8")).digest()


def read_excerpt_meta(conn: psycopg.Connection) -> tuple[str, int] | None:
    """The excerpt model and dimension recorded in ``index_meta``, or None when none was recorded."""
    row = conn.execute("SELECT excerpt_model, excerpt_dimension FROM index_meta").fetchone()
    if row is None or row[0] is None:
        return None
    return str(row[0]), int(row[1])


def check_excerpt_meta(conn: psycopg.Connection, model: str, dimension: int) -> None:
    """Fail loudly when the column holds another model's (or size's) vectors than the configured one."""
    meta = read_excerpt_meta(conn)
    if meta is not None and meta != (model, dimension):
        raise IndexMismatchError(
            f"excerpt_vectors holds {meta[0]} ({meta[1]}-d) vectors (index_meta), but "
            f"CITEBOT_EXCERPT_EMBEDDINGS__MODEL / __DIMENSION say {model} ({dimension}-d): set them back, "
            "or refill the column with `citebot backfill --excerpts --reindex-excerpts`",
            service="postgres",
        )


class PostgresExcerptIndex:
    """``excerpt_vectors`` read through a connection source (a pool's ``connection``)."""

    def __init__(self, connections: ConnectionSource, *, model: str, dimension: int) -> None:
        self._connections = connections
        self.model = model
        self.dimension = dimension
        self._checked = False
        self._lock = threading.Lock()

    def cosines(self, vector: Sequence[float], post_ids: Sequence[int]) -> dict[int, float]:
        """The question's cosine to each post's excerpt vector; posts without one are absent."""
        if not post_ids:
            return {}
        if len(vector) != self.dimension:
            raise IndexMismatchError(
                f"question vector has {len(vector)} dimensions, the excerpt column {self.dimension}",
                service="postgres",
            )
        params = {"q": Vector(np.asarray(vector, dtype=np.float32)), "ids": list(post_ids)}
        # A database migrated before the excerpt table existed is "not there yet", not a bug.
        with (
            database_errors("excerpt column unavailable", unavailable=(psycopg.errors.UndefinedTable,)),
            self._connections() as conn,
            conn.transaction(),
        ):
            if not self._checked:
                with self._lock:
                    if read_excerpt_meta(conn) is None:
                        raise ConfigError(
                            "the excerpt column was never filled: run `citebot backfill --excerpts`",
                            service="postgres",
                        )
                    check_excerpt_meta(conn, self.model, self.dimension)
                    self._checked = True
            rows = conn.execute(EXCERPT_COSINES_SQL, params).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}
