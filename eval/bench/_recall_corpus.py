"""The recall bench's synthetic corpus and its cached databases (one per size, one index per kind).

Each size gets its own database on the bench's embedded PostgreSQL (``.cache/pg-bench``): the real
schema, filled by a binary COPY with clustered, L2-normalised vectors (numpy, seeded), then each vector
index kind built over it and kept (``bench_indexes``, with its build time). A later run finds the table
and the indexes and only generates the same vectors again; ``--rebuild`` starts over. Both kinds live on
the same table: the ORDER BY expression of each recall query picks its own index.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from eval.stack.postgres import EmbeddedPostgres, ensure_database
from worker.db.migrate import migrate
from worker.db.vector_index import (
    HNSW_WITH,
    INDEX_NAMES,
    VectorIndexKind,
    drop_vector_indexes,
    hnsw_options,
    index_ddl,
)
from worker.settings import Settings

DB_NAME = "citebot_bench_recall"
MODEL = "bench-synthetic"
CHUNK = 20_000
RESTRICTED_CATEGORY = 1
CATEGORIES = 10  # category 1 of 1..10 is restricted in the filtered runs: ~10 % of the posts


@dataclass(frozen=True, slots=True)
class Params:
    n: int
    dim: int
    clusters: int
    seed: int
    latent: int = 0
    storage: str = "main"  # of the embedding column (migration 0008); "extended" was the schema's before

    @property
    def key(self) -> str:
        shape = f" latent={self.latent}" if self.latent else ""
        kept = f" storage={self.storage}" if self.storage != "extended" else ""  # old caches: extended
        return f"n={self.n} dim={self.dim} clusters={self.clusters} seed={self.seed}{shape}{kept}"

    @property
    def db_name(self) -> str:
        name = f"{DB_NAME}_{self.n}_{self.dim}" + (f"_latent{self.latent}" if self.latent else "")
        return name + (f"_{self.storage}" if self.storage != "extended" else "")


def parse_size(text: str) -> int:
    """``100k``, ``1M``, ``2.5M`` or a plain number of posts."""
    t = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if scale > 1 else t) * scale)


def _space(p: Params) -> tuple[np.random.Generator, np.ndarray, np.ndarray | None]:
    """The clusters' centres (and, for the latent shape, the basis of the latent subspace)."""
    rng = np.random.default_rng(p.seed)
    if not p.latent:
        return rng, _unit(rng.standard_normal((p.clusters, p.dim), dtype=np.float32)), None
    centres = _unit(rng.standard_normal((p.clusters, p.latent), dtype=np.float32))
    basis, _ = np.linalg.qr(rng.standard_normal((p.dim, p.latent)))
    return rng, centres, basis.astype(np.float32)


def _points(
    p: Params, rng: np.random.Generator, centres: np.ndarray, basis: np.ndarray | None, size: int
) -> np.ndarray:
    """Unit points around random centres. Isotropic: noise of norm ~1 in all ``dim`` directions (a
    point's cosine to its centre is ~0.7). Latent: the same in a ``latent``-d subspace, mapped into
    ``dim`` dimensions, plus a little isotropic noise — closer to real text embeddings, whose intrinsic
    dimension is far below their size."""
    width = centres.shape[1]
    which = rng.integers(0, p.clusters, size)
    pts = centres[which] + np.float32(1.0 / np.sqrt(width)) * rng.standard_normal(
        (size, width), dtype=np.float32
    )
    if basis is not None:
        iso = np.float32(0.3 / np.sqrt(p.dim)) * rng.standard_normal((size, p.dim), dtype=np.float32)
        pts = _unit(pts) @ basis.T + iso
    return _unit(pts)


def chunks(p: Params) -> Iterator[np.ndarray]:
    """The corpus, chunk by chunk, as float16 (what halfvec stores)."""
    rng, centres, basis = _space(p)
    for start in range(0, p.n, CHUNK):
        yield _points(p, rng, centres, basis, min(CHUNK, p.n - start)).astype(np.float16)


def corpus(p: Params) -> np.ndarray:
    """The whole corpus as float32 (the halfvec-rounded values): what the exact search scans."""
    out = np.empty((p.n, p.dim), dtype=np.float32)
    row = 0
    for chunk in chunks(p):
        out[row : row + len(chunk)] = chunk
        row += len(chunk)
    return out


def make_queries(p: Params, count: int) -> np.ndarray:
    """New points from the same clusters, rounded like the stored vectors."""
    _, centres, basis = _space(p)
    rng = np.random.default_rng(p.seed + 1)
    return _points(p, rng, centres, basis, count).astype(np.float16).astype(np.float32)


def _unit(a: np.ndarray) -> np.ndarray:
    out: np.ndarray = a / np.linalg.norm(a, axis=1, keepdims=True)
    return out


def categories(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 2).integers(1, CATEGORIES + 1, n)


def start_server(path: Path, shared_buffers: str, *, keep: bool = False) -> tuple[EmbeddedPostgres, str]:
    """The bench's own server, restarted once with the ``shared_buffers`` asked for; ``keep`` leaves
    it running at the end (another bench process is using it)."""
    server = EmbeddedPostgres(path, keep_running=keep)
    url = server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        current = conn.execute("SELECT setting FROM pg_settings WHERE name = 'shared_buffers'").fetchone()
        want = conn.execute("SELECT pg_size_bytes(%s) / 8192", (shared_buffers,)).fetchone()
        restart = bool(current and want and int(current[0]) != int(want[0]))
        if restart:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    if restart:
        url = server.restart()  # also when it is to be kept: a plain stop() would leave it running
    return server, url


HUGE_PAGE_MODES = ("off", "try", "on")


def huge_pages_status(url: str) -> str:
    """Whether the server got huge pages for its shared memory: "on" or "off" (``huge_pages_status``,
    PostgreSQL 17+; ``huge_pages = try`` falls back to off silently when the OS has too few)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('huge_pages_status', true)").fetchone()
    return str(row[0]) if row and row[0] else "unknown"


def reserved_huge_pages() -> int:
    """The huge pages the OS has reserved (``vm.nr_hugepages``), 0 where it says nothing."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("HugePages_Total:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def set_huge_pages(server: EmbeddedPostgres, url: str, mode: str) -> str:
    """Restart the bench's server with ``huge_pages = mode`` (off, try, on); return its URL. For "on",
    first check that the OS has reserved enough: the server would refuse to start."""
    if mode not in HUGE_PAGE_MODES:
        raise SystemExit(f"--huge-pages: {mode!r} is not one of {', '.join(HUGE_PAGE_MODES)}")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW shared_memory_size_in_huge_pages").fetchone()
        needed = int(row[0]) if row else 0
        reserved = reserved_huge_pages()
        if mode == "on" and needed > reserved:
            raise SystemExit(
                f"--huge-pages on: this server needs {needed} huge pages, the OS has reserved "
                f"{reserved}; as root: sysctl -w vm.nr_hugepages={needed + 16}"
            )
        conn.execute(f"ALTER SYSTEM SET huge_pages = '{mode}'")  # a literal: one of HUGE_PAGE_MODES
    return server.restart()


def reset_huge_pages(url: str) -> None:
    """Back to PostgreSQL's default (try) at the server's next start."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET huge_pages")


def table_ready(url: str, p: Params) -> bool:
    """Whether the size's database holds the corpus of ``p`` (a finished load)."""
    db_url = ensure_database(url, p.db_name)
    with psycopg.connect(db_url, autocommit=True) as conn:
        have = conn.execute("SELECT to_regclass('bench_params') IS NOT NULL").fetchone()
        if not (have and have[0]):
            return False
        row = conn.execute("SELECT key FROM bench_params").fetchone()
    return bool(row and row[0] == p.key)


def load_table(url: str, p: Params) -> float:
    """A fresh database for ``p`` with the corpus COPYed in and no vector index; return seconds."""
    db_url = ensure_database(url, p.db_name, fresh=True)
    settings = Settings.model_validate(
        {"database": {"url": db_url}, "embeddings": {"model": MODEL, "dimension": p.dim}}
    )
    migrate(settings)
    cats = categories(p.n, p.seed)
    t0 = time.perf_counter()
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        drop_vector_indexes(conn)
        conn.execute(f"ALTER TABLE post_index ALTER COLUMN embedding SET STORAGE {p.storage.upper()}")
        copy_sql = (
            "COPY post_index (post_id, topic_id, post_number, topic_slug, topic_title, category_id, text,"
            " digest, model, embedding) FROM STDIN (FORMAT BINARY)"
        )
        row_id = 0
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(
                ["bigint", "bigint", "integer", "text", "text", "bigint", "text", "bytea", "text", "halfvec"]
            )
            for chunk in chunks(p):
                for vec in chunk:
                    pid = row_id + 1
                    cat = int(cats[row_id])
                    row = (pid, pid // 8 + 1, pid % 8 + 1, "t", "t", cat, "x", b"\0", MODEL, HalfVector(vec))
                    copy.write_row(row)
                    row_id += 1
                print(f"  loaded {row_id:,}/{p.n:,}", end="\r", flush=True)
        # Every category is public (backfill.categories: recall reads only those); the filtered runs
        # make RESTRICTED_CATEGORY read-restricted and back.
        conn.execute(
            "INSERT INTO categories (category_id, read_restricted, seen_by)"
            " SELECT g, false, 'bench' FROM generate_series(1, %s) g",
            (CATEGORIES,),
        )
        conn.commit()
    load_s = time.perf_counter() - t0
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE post_index")
        conn.execute("CREATE TABLE bench_indexes (kind text PRIMARY KEY, build_s float8)")
        conn.execute("CREATE TABLE bench_params (key text, load_s float8)")
        conn.execute("INSERT INTO bench_params VALUES (%s, %s)", (p.key, load_s))
    print(f"\nloaded {p.n:,} rows in {load_s:.0f} s")
    return load_s


def built_indexes(db_url: str) -> dict[str, float]:
    """The index kinds built on the size's table with the worker's current DDL, and their build times
    (seconds). An index built with other graph parameters (``HNSW_WITH`` changed since) is not
    counted: the bench builds it again."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT kind, build_s FROM bench_indexes").fetchall()
        present = {
            str(r[0]): dict(str(o).split("=", 1) for o in (r[1] or []))
            for r in conn.execute(
                "SELECT c.relname, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indisvalid"
            )
        }
    return {
        str(k): float(s)
        for k, s in rows
        if k in INDEX_NAMES and present.get(INDEX_NAMES[k]) == hnsw_options(k)
    }


def build_index(db_url: str, kind: VectorIndexKind, dim: int, maintenance_work_mem: str) -> float:
    """Build the ``kind`` index (the DDL the worker uses) over the loaded table; return seconds."""
    print(f"building the {kind} HNSW index ({HNSW_WITH[kind]})", flush=True)
    t0 = time.perf_counter()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAMES[kind]}")
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_work_mem,))
        conn.execute("SET max_parallel_maintenance_workers = 2")
        conn.execute(index_ddl(kind, dim).encode())
        build_s = time.perf_counter() - t0
        conn.execute(
            "INSERT INTO bench_indexes (kind, build_s) VALUES (%s, %s)"
            " ON CONFLICT (kind) DO UPDATE SET build_s = EXCLUDED.build_s",
            (kind, build_s),
        )
    print(f"{kind} index built in {build_s:.0f} s", flush=True)
    return build_s


def load_seconds(db_url: str) -> float:
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("SELECT load_s FROM bench_params").fetchone()
    return float(row[0]) if row and row[0] is not None else 0.0
