"""The HNSW index of ``post_index``: dropped before a bulk load, built after it.

Its kind (halfvec or binary-quantized) is the one ``index_meta`` records (``worker.db.vector_index``).

Inserting into an HNSW graph row by row is several times slower than building it once over the loaded
table, so a load into an empty table (or one much larger than the table) drops the index first and
builds it at the end. A table that recall is reading while we build gets ``CREATE INDEX CONCURRENTLY``
(no write lock); an empty one a plain build. A build that failed half-way leaves an INVALID index,
which is dropped and built again.
"""

from __future__ import annotations

import logging
import time

import psycopg

from worker.db.vector_index import INDEX_NAMES, drop_vector_indexes, index_ddl, read_kind

log = logging.getLogger(__name__)


def index_state(conn: psycopg.Connection) -> str:
    """``valid``, ``invalid`` (a failed concurrent build) or ``missing``."""
    with conn.transaction():
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
            (INDEX_NAMES[read_kind(conn)],),
        ).fetchone()
    if row is None:
        return "missing"
    return "valid" if row[0] else "invalid"


def drop_index(conn: psycopg.Connection) -> None:
    with conn.transaction():
        drop_vector_indexes(conn)
    log.info("dropped the vector index for the bulk load")


def build_index(url: str, *, concurrently: bool, maintenance_work_mem: str = "1GB") -> float:
    """Build the index when missing (or invalid) on its own autocommit connection; return seconds."""
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
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
