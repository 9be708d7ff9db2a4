"""The run-time check that the configured embedding model matches the one that built the index."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from worker.errors import IndexMismatchError, PermanentError


@dataclass(frozen=True, slots=True)
class IndexMeta:
    model: str
    dimension: int
    strategy: str
    vector_index: str = "halfvec"


def read_index_meta(conn: psycopg.Connection) -> IndexMeta:
    """The model, dimension, text strategy and vector index kind recorded at migrate (or reindex) time."""
    row = conn.execute("SELECT model, dimension, strategy, vector_index FROM index_meta").fetchone()
    if row is None:
        raise PermanentError("index_meta is empty: run `citebot db migrate`", service="postgres")
    return IndexMeta(str(row[0]), int(row[1]), str(row[2]), str(row[3]))


def check_index_meta(conn: psycopg.Connection, model: str, dimension: int) -> IndexMeta:
    """Fail loudly when vectors of another model or size would be mixed with the index's."""
    meta = read_index_meta(conn)
    if meta.model != model or meta.dimension != dimension:
        raise IndexMismatchError(
            f"the post index holds {meta.model} ({meta.dimension}-d) vectors (index_meta), but this "
            f"process is configured for {model} ({dimension}-d: CITEBOT_EMBEDDINGS__MODEL, "
            "CITEBOT_EMBEDDINGS__DIMENSION); set those back to the index's, or rebuild the index with "
            "`citebot backfill --source … --reindex`",
            service="postgres",
        )
    return meta
