"""Which vector index ``post_index`` carries, its DDL, and switching from one kind to the other.

Two kinds, chosen by ``CITEBOT_RETRIEVAL__VECTOR_INDEX`` and recorded in ``index_meta.vector_index``:

- ``halfvec``: HNSW over the halfvec column (``halfvec_cosine_ops``). Recall is one index scan.
- ``binary``: HNSW over ``binary_quantize(embedding)::bit(D)`` (``bit_hamming_ops``): one bit per
  dimension, so the graph's vectors take 1/16 of the halfvec ones and each distance is a popcount.
  Recall scans it by Hamming distance for ``binary_candidates`` posts and re-ranks those by the exact
  cosine of the halfvec column, which stays in the table (see ``worker.retrieval.recall``).

Only the chosen index exists: keeping both would double the write cost of every upsert and the disk,
and the unused one would still be rebuilt by every bulk load. ``citebot db migrate`` switches (builds
the new one, drops the old one, records the kind) inside its transaction; a switch on a big table
takes the build time of the new index (docs/operations.md, sizing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, get_args

import psycopg

log = logging.getLogger(__name__)

VectorIndexKind = Literal["halfvec", "binary"]
KINDS: tuple[VectorIndexKind, ...] = get_args(VectorIndexKind)

INDEX_NAMES: dict[VectorIndexKind, str] = {
    "halfvec": "post_index_embedding_hnsw",
    "binary": "post_index_embedding_bq_hnsw",
}
# The graph parameters of each kind (eval/bench/recall.py, docs/performance.md). The bit graph is built
# with a wider ef_construction: Hamming distances over 1,024 bits tie massively, and at 64 its graph
# missed neighbours an exact Hamming scan finds (425k, 400 candidates: recall@25 0.955 at 64, 1.000 at
# 128, same index size, build x1.75). The halfvec graph has m = 24, ef_construction = 128 since issue
# 18's fourth session: at 425k recall@25 0.989 at ef_search 40 against 0.966 at 200 for m = 16,
# ef_construction = 64, with less server time a query (1.4 against 2.5 ms), the same index pages at
# 1024-d, and about 2.7x the build time.
HNSW_WITH: dict[VectorIndexKind, str] = {
    "halfvec": "WITH (m = 24, ef_construction = 128)",
    "binary": "WITH (m = 16, ef_construction = 128)",
}


def hnsw_options(kind: VectorIndexKind) -> dict[str, str]:
    """The graph parameters of ``kind``'s DDL as PostgreSQL lists them (``pg_class.reloptions``)."""
    inner = HNSW_WITH[kind].removeprefix("WITH (").removesuffix(")")
    pairs = (part.split("=") for part in inner.split(","))
    return {name.strip(): value.strip() for name, value in pairs}


def read_graph(conn: psycopg.Connection, kind: VectorIndexKind) -> dict[str, str] | None:
    """The graph parameters ``kind``'s index was built with (None: no such index)."""
    row = conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)", (INDEX_NAMES[kind],)
    ).fetchone()
    if row is None:
        return None
    return dict(str(option).split("=", 1) for option in (row[0] or []))


def index_ddl(kind: VectorIndexKind, dimension: int, *, concurrently: bool = False) -> str:
    """``CREATE INDEX`` for ``kind`` over a ``dimension``-d column (``IF NOT EXISTS``)."""
    how = "CONCURRENTLY " if concurrently else ""
    if kind == "halfvec":
        expr = "embedding halfvec_cosine_ops"
    else:
        # The cast's typmod must be a literal: the query repeats the same expression to use the index.
        expr = f"(binary_quantize(embedding)::bit({int(dimension)})) bit_hamming_ops"
    name = INDEX_NAMES[kind]
    return f"CREATE INDEX {how}IF NOT EXISTS {name} ON post_index USING hnsw ({expr}) {HNSW_WITH[kind]}"


def read_kind(conn: psycopg.Connection) -> VectorIndexKind:
    """The kind recorded in ``index_meta`` (``halfvec`` before any switch)."""
    row = conn.execute("SELECT vector_index FROM index_meta").fetchone()
    kind = str(row[0]) if row else "halfvec"
    if kind not in KINDS:  # pragma: no cover - the column has a CHECK constraint
        raise ValueError(f"unknown vector index kind {kind!r} in index_meta")
    return kind


def index_state(conn: psycopg.Connection) -> str:
    """``valid``, ``invalid`` (a failed concurrent build, or one still running) or ``missing`` (a bulk
    load dropped it and has not built it yet, or was stopped before it could)."""
    with conn.transaction():
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
            (INDEX_NAMES[read_kind(conn)],),
        ).fetchone()
    if row is None:
        return "missing"
    return "valid" if row[0] else "invalid"


def drop_vector_indexes(conn: psycopg.Connection) -> None:
    """Drop the vector index of either kind (a bulk load or a reindex builds it again afterwards)."""
    for name in INDEX_NAMES.values():
        conn.execute(f"DROP INDEX IF EXISTS {name}")


def switch_vector_index(conn: psycopg.Connection, kind: VectorIndexKind, dimension: int) -> bool:
    """Make ``kind`` the index of ``post_index`` inside the caller's transaction; True if it changed."""
    current = read_kind(conn)
    if current == kind:
        return False
    log.info("switching the vector index from %s to %s (building %s)", current, kind, INDEX_NAMES[kind])
    conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAMES[current]}")
    conn.execute(index_ddl(kind, dimension).encode())
    conn.execute("UPDATE index_meta SET vector_index = %s, updated_at = now()", (kind,))
    return True


# Above this size a vector index without huge pages costs recall a large share of its time: with 4 KB
# pages every HNSW scan misses the TLB at most of the pages it visits, and each backend's first touch
# of a shared-buffer page is a page fault. Measured at 425k x 1024-d (a 1.1 GiB halfvec index,
# docs/performance.md, three quiet runs): p50 end to end 1.88 ms with huge pages, 3.02 ms without, at
# ef_search 25.
HUGE_PAGES_ADVISED_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class IndexMemory:
    """Where ``kind``'s vector index stands against the server's memory settings."""

    index: str
    index_bytes: int  # 0: no such index
    shared_buffers_bytes: int
    huge_pages: str  # "on", "off", or "unknown" (a server before PostgreSQL 17 does not say)

    def advice(self) -> list[str]:
        """What an operator should change for millisecond recall (docs/operations.md, 'Sizing the
        index'); empty when nothing."""
        out = []
        size = f"{self.index} is {self.index_bytes / 2**30:.2f} GiB"
        if self.index_bytes > self.shared_buffers_bytes:
            out.append(
                f"{size}, more than shared_buffers ({self.shared_buffers_bytes / 2**30:.2f} GiB): "
                "recall reads pages through the OS cache or the disk; raise shared_buffers"
            )
        if self.index_bytes >= HUGE_PAGES_ADVISED_BYTES and self.huge_pages == "off":
            out.append(
                f"{size} and the server runs without huge pages: recall takes about 1.6 times as long "
                "as with them; reserve them (vm.nr_hugepages) and set huge_pages = on"
            )
        return out


def read_memory(conn: psycopg.Connection, kind: VectorIndexKind) -> IndexMemory:
    """The size of ``kind``'s index, ``shared_buffers`` and whether the server got huge pages
    (``huge_pages_status``, PostgreSQL 17+; ``huge_pages = try`` falls back silently)."""
    row = conn.execute(
        "SELECT coalesce(pg_relation_size(to_regclass(%s)), 0),"
        " pg_size_bytes(current_setting('shared_buffers')),"
        " coalesce(current_setting('huge_pages_status', true), 'unknown')",
        (INDEX_NAMES[kind],),
    ).fetchone()
    if row is None:  # pragma: no cover - a SELECT without FROM returns one row
        raise RuntimeError("no row from the memory settings query")
    return IndexMemory(INDEX_NAMES[kind], int(row[0]), int(row[1]), str(row[2]))
