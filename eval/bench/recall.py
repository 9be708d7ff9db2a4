"""``python -m eval.bench recall``: the recall stage on synthetic posts, against exact search.

Builds ``post_index`` (the real schema, halfvec, HNSW m=16 ef_construction=64 built after a binary
COPY) in its own embedded PostgreSQL (``.cache/pg-bench``), filled with clustered, L2-normalised
synthetic vectors (numpy, seeded). Each query goes through ``PostgresPostIndex.recall`` — the code the
bot runs — and is compared with a numpy float32 brute-force scan of the same (halfvec-rounded) vectors
in the same run: recall@k, latency p50/p99 and the speed ratio. Then again with 10 % of the posts in a
restricted category, where every query must still return k rows (iterative scan).

A built database is reused when its parameters match (``--rebuild`` forces a new one).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from eval.bench.report import emit, print_table
from eval.stack.postgres import EmbeddedPostgres, ensure_database
from worker.db.migrate import migrate
from worker.retrieval.recall import _SETTINGS_SQL, RECALL_SQL, PostgresPostIndex, single_connection
from worker.settings import RetrievalSettings, Settings

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / ".cache" / "pg-bench"
DB_NAME = "citebot_bench_recall"
BUILD_LOG = ROOT / ".cache" / "bench-recall-build.json"  # load/build times of the index kept for reuse
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

    @property
    def key(self) -> str:
        shape = f" latent={self.latent}" if self.latent else ""
        return f"n={self.n} dim={self.dim} clusters={self.clusters} seed={self.seed}{shape} m=16 efc=64"

    @property
    def db_name(self) -> str:
        return DB_NAME + (f"_latent{self.latent}" if self.latent else "")


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m eval.bench recall", description=__doc__)
    ap.add_argument("--n", type=int, default=425_000, help="posts (default 425000)")
    ap.add_argument("--dim", type=int, default=1024, help="dimension (default 1024)")
    ap.add_argument("--queries", type=int, default=200, help="queries per configuration (default 200)")
    ap.add_argument("--k", type=int, default=25, help="rows per query (default 25)")
    ap.add_argument("--ef", default="40,100,200", help="hnsw.ef_search values, comma-separated")
    ap.add_argument("--clusters", type=int, default=0, help="clusters (default n/250)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--latent", type=int, default=0, help="clusters in a LATENT-d subspace (default 0: isotropic, harder)"
    )
    ap.add_argument("--brute-queries", type=int, default=20, help="queries timed on the numpy scan")
    ap.add_argument("--shared-buffers", default="3GB", help="server shared_buffers (index kept in memory)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the table and index even if they match")
    return ap.parse_args(argv)


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


def start_server(shared_buffers: str) -> tuple[EmbeddedPostgres, str]:
    """The bench's own server, restarted once with a shared_buffers big enough to hold the index."""
    server = EmbeddedPostgres(DATA_DIR, keep_running=False)
    url = server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        current = conn.execute("SELECT setting FROM pg_settings WHERE name = 'shared_buffers'").fetchone()
        want = conn.execute("SELECT pg_size_bytes(%s) / 8192", (shared_buffers,)).fetchone()
        if current and want and int(current[0]) != int(want[0]):
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
            restart = True
        else:
            restart = False
    if restart:
        server.stop()
        server = EmbeddedPostgres(DATA_DIR, keep_running=False)
        url = server.start()
    return server, url


def build(url: str, p: Params, rebuild: bool) -> tuple[np.ndarray, float, float]:
    """Load the corpus and build the index unless already there; return the vectors and the timings."""
    db_url = ensure_database(url, p.db_name)
    with psycopg.connect(db_url, autocommit=True) as conn:
        have = conn.execute("SELECT to_regclass('bench_params') IS NOT NULL").fetchone()
        stored = None
        if have and have[0]:
            row = conn.execute("SELECT key FROM bench_params").fetchone()
            stored = row[0] if row else None
    if stored == p.key and not rebuild:
        print(f"reusing the built index ({p.key}); generating the same vectors again")
        built = json.loads(BUILD_LOG.read_text("utf-8")) if BUILD_LOG.exists() else {}
        times = built.get(p.key, {})
        return np.concatenate(list(chunks(p))), times.get("load_s", 0.0), times.get("build_s", 0.0)
    db_url = ensure_database(url, p.db_name, fresh=True)
    settings = Settings.model_validate(
        {"database": {"url": db_url}, "embeddings": {"model": MODEL, "dimension": p.dim}}
    )
    migrate(settings)
    vectors = np.empty((p.n, p.dim), dtype=np.float16)
    cats = categories(p.n, p.seed)
    t0 = time.perf_counter()
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        conn.execute("DROP INDEX post_index_embedding_hnsw")
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
                vectors[row_id : row_id + len(chunk)] = chunk
                for vec in chunk:
                    pid = row_id + 1
                    copy.write_row(
                        (
                            pid,
                            pid // 8 + 1,
                            pid % 8 + 1,
                            "t",
                            "t",
                            int(cats[row_id]),
                            "x",
                            b"\0",
                            MODEL,
                            HalfVector(vec),
                        )
                    )
                    row_id += 1
                print(f"  loaded {row_id:,}/{p.n:,}", end="\r", flush=True)
        conn.commit()
    load_s = time.perf_counter() - t0
    print(f"\nloaded {p.n:,} rows in {load_s:.0f} s; building HNSW (m=16, ef_construction=64)")
    t0 = time.perf_counter()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '6GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        conn.execute(
            "CREATE INDEX post_index_embedding_hnsw ON post_index"
            " USING hnsw (embedding halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)"
        )
        conn.execute("VACUUM ANALYZE post_index")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_params (key text)")
        conn.execute("DELETE FROM bench_params")
        conn.execute("INSERT INTO bench_params VALUES (%s)", (p.key,))
    build_s = time.perf_counter() - t0
    print(f"index built in {build_s:.0f} s")
    built = json.loads(BUILD_LOG.read_text("utf-8")) if BUILD_LOG.exists() else {}
    built[p.key] = {"load_s": load_s, "build_s": build_s}
    BUILD_LOG.write_text(json.dumps(built), "utf-8")
    return vectors, load_s, build_s


def with_db(url: str, p: Params) -> str:
    from eval.stack.postgres import with_database

    return with_database(url, p.db_name)


def exact(vectors: np.ndarray, queries: np.ndarray, k: int, mask: np.ndarray | None) -> np.ndarray:
    """Exact top-k post ids (1-based) by cosine, float32, chunked so memory stays bounded."""
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    best_sc = np.zeros((len(queries), 0), dtype=np.float32)
    for start in range(0, len(vectors), 100_000):
        block = vectors[start : start + 100_000].astype(np.float32)
        scores = queries @ block.T
        if mask is not None:
            scores[:, ~mask[start : start + 100_000]] = -np.inf
        ids = np.broadcast_to(np.arange(start + 1, start + 1 + len(block)), scores.shape)
        all_sc = np.concatenate([best_sc, scores], axis=1)
        all_ids = np.concatenate([best_ids, ids], axis=1)
        top = np.argpartition(-all_sc, k - 1, axis=1)[:, :k]
        best_sc = np.take_along_axis(all_sc, top, axis=1)
        best_ids = np.take_along_axis(all_ids, top, axis=1)
    return best_ids


def time_brute_force(vectors: np.ndarray, queries: np.ndarray, k: int) -> list[float]:
    """Per-query latency of a numpy float32 brute-force scan over the whole corpus (the reference)."""
    full = vectors.astype(np.float32)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        scores = full @ q
        top = np.argpartition(-scores, k - 1)[:k]
        _ranked = top[np.argsort(-scores[top])]
        times.append((time.perf_counter() - t0) * 1000)
    del full
    return times


def server_times(
    conn: psycopg.Connection, settings: RetrievalSettings, queries: np.ndarray, k: int
) -> np.ndarray:
    """The server's own execution time of the same recall query (EXPLAIN ANALYZE), in ms.

    Its p50 beside the end-to-end p50 splits a query's latency into the index's share and the
    client's (the round trips, the vector out and 25 rows back).
    """
    times = []
    for q in queries:
        with conn.transaction():
            conn.execute(
                _SETTINGS_SQL,
                (str(settings.ef_search), settings.iterative_scan, str(settings.max_scan_tuples)),
            )
            row = conn.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + RECALL_SQL,
                {"q": HalfVector(q.astype(np.float32)), "k": k, "exclude": []},
            ).fetchone()
        if row is None:
            raise RuntimeError("EXPLAIN returned no plan")
        times.append(float(row[0][0]["Execution Time"]))
    return np.asarray(times)


def run_queries(
    db_url: str, p: Params, ef: int, queries: np.ndarray, truth: np.ndarray, k: int
) -> dict[str, float]:
    settings = RetrievalSettings(ef_search=ef, recall_k=k)  # type: ignore[call-arg]
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        index = PostgresPostIndex(single_connection(conn), settings, model=MODEL, dimension=p.dim)
        for q in queries[:10]:  # warm the connection and the prepared statement
            index.recall(q, k)
        lat, hits, rows = [], [], []
        for q, gold in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            got = index.recall(q, k)
            lat.append((time.perf_counter() - t0) * 1000)
            rows.append(len(got))
            hits.append(len({c.post_id for c in got} & set(gold.tolist())) / k)
        server = server_times(conn, settings, queries, k)
    a = np.asarray(lat)
    return {
        "ef_search": ef,
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "server_p50_ms": float(np.percentile(server, 50)),
        "recall_at_k": float(np.mean(hits)),
        "min_rows": int(min(rows)),
    }


def main(argv: list[str]) -> int:
    args = parse(argv)
    p = Params(args.n, args.dim, args.clusters or max(1, args.n // 250), args.seed, args.latent)
    efs = [int(x) for x in args.ef.split(",")]
    server, url = start_server(args.shared_buffers)
    try:
        vectors, load_s, build_s = build(url, p, args.rebuild)
        db_url = with_db(url, p)
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            conn.execute("SELECT pg_prewarm('post_index_embedding_hnsw'), pg_prewarm('post_index')")
            conn.execute("DELETE FROM restricted_categories")
        queries = make_queries(p, args.queries)
        mask = categories(p.n, p.seed) != RESTRICTED_CATEGORY
        truth = exact(vectors, queries, args.k, None)
        truth_f = exact(vectors, queries, args.k, mask)
        brute = np.asarray(time_brute_force(vectors, queries[: args.brute_queries], args.k))
        del vectors
        brute_p50 = float(np.percentile(brute, 50))
        results = []
        for ef in efs:
            results.append({"filter": "none", **run_queries(db_url, p, ef, queries, truth, args.k)})
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO restricted_categories (category_id) VALUES (%s)", (RESTRICTED_CATEGORY,)
            )
        try:
            for ef in efs:
                results.append({"filter": "10%", **run_queries(db_url, p, ef, queries, truth_f, args.k)})
        finally:
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("DELETE FROM restricted_categories")
    finally:
        server.stop()
    print(
        f"\n{p.n:,} posts × {p.dim}-d halfvec, HNSW m=16 ef_construction=64,"
        f" {args.queries} queries, k={args.k}"
    )
    print(f"numpy float32 brute force: p50 {brute_p50:.1f} ms/query ({len(brute)} queries)\n")
    rows = [
        [
            r["filter"],
            r["ef_search"],
            r["p50_ms"],
            r["p99_ms"],
            r["server_p50_ms"],
            r["recall_at_k"],
            r["min_rows"],
            brute_p50 / float(r["p50_ms"]),  # type: ignore[arg-type]
        ]
        for r in results
    ]
    print_table(
        [
            "filter",
            "ef_search",
            "p50 ms",
            "p99 ms",
            "server p50 ms",
            f"recall@{args.k}",
            "min rows",
            "× vs numpy",
        ],
        rows,
    )
    default = (
        next(r for r in results if r["filter"] == "none" and r["ef_search"] == 100) if 100 in efs else None
    )
    emit(
        "recall" if not p.latent else f"recall-latent{p.latent}",
        {
            "n": p.n,
            "shape": f"latent {p.latent}-d" if p.latent else "isotropic",
            "dim": p.dim,
            "clusters": p.clusters,
            "queries": args.queries,
            "k": args.k,
            "load_s": round(load_s, 1),
            "build_s": round(build_s, 1),
            "brute_force_p50_ms": round(brute_p50, 2),
            "results": results,
            "targets": {"p50_ms": 2.0, "p99_ms": 6.0, "recall_at_k": 0.95, "filtered_rows": args.k},
            "default_ef_search": default,
            "load_average": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        },
    )
    return 0
