"""The HNSW index of ``post_index``: dropped before a bulk load, built after it, and built again by the
next run whenever a bulk load was stopped before it could.

Its kind (halfvec or binary-quantized) is the one ``index_meta`` records (``worker.db.vector_index``).

Inserting into an HNSW graph row by row is several times slower than building it once over the loaded
table, so a bulk load (``--bulk``, ``--reindex``, or any load into an empty table) drops the index first
and builds it at the end. Every other run (the scheduled incremental one) writes into the live index in
place and never drops it; it starts by building the index when it is missing or invalid
(``ensure_index``), so an interrupted bulk load leaves recall on a sequential scan only until the next
run. A table that recall is reading while we build gets ``CREATE INDEX CONCURRENTLY`` (no write lock);
an empty one a plain build. A build that failed half-way leaves an INVALID index, which is dropped and
built again.
"""

from __future__ import annotations

import logging
import time

import psycopg

from backfill.lock import NAMESPACE
from worker.db.vector_index import INDEX_NAMES, drop_vector_indexes, index_ddl, index_state, read_kind

log = logging.getLogger(__name__)

__all__ = ["build_index", "drop_index", "index_state"]
# The advisory lock (in the backfill namespace) that one build holds: a second run that finds the index
# missing waits for the build under way and then finds it valid, instead of dropping it as invalid.
BUILD_LOCK = -1


def drop_index(conn: psycopg.Connection) -> None:
    with conn.transaction():
        drop_vector_indexes(conn)
    log.info("dropped the vector index for the bulk load")


def build_index(url: str, *, concurrently: bool, maintenance_work_mem: str = "1GB") -> float:
    """Build the index when missing (or invalid) on its own autocommit connection; return seconds."""
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if index_state(conn) == "valid":
            return 0.0
        conn.execute("SELECT pg_advisory_lock(%s, %s)", (NAMESPACE, BUILD_LOCK))
        state = index_state(conn)
        if state == "valid":
            return 0.0
        kind = read_kind(conn)
        row = conn.execute("SELECT dimension FROM index_meta").fetchone()
        dimension = int(row[0]) if row else 0
        name = INDEX_NAMES[kind]
        if state == "invalid":
            conn.execute(f"DROP INDEX {'CONCURRENTLY ' if concurrently else ''}IF EXISTS {name}")
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
        log.info("building %s%s", name, " concurrently" if concurrently else "")
        conn.execute(index_ddl(kind, dimension, concurrently=concurrently).encode())
    elapsed = time.perf_counter() - start
    log.info("built %s in %.1f s", name, elapsed)
    return elapsed
