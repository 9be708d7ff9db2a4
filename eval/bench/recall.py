"""``python -m eval.bench recall``: the recall stage on synthetic posts, by size and index kind.

For each size (``--sizes 100k,425k,1M,2M``) the bench builds ``post_index`` (the real schema) in its own
embedded PostgreSQL (``.cache/pg-bench``), filled with clustered, L2-normalised synthetic vectors
(numpy, seeded), and each vector index kind over it: ``halfvec`` (HNSW over the halfvec column) and
``binary`` (HNSW over ``binary_quantize(embedding)``, re-ranked by the exact cosine), both m=16,
ef_construction=64 — the worker's own DDL (``worker.db.vector_index``). Tables and indexes are cached
per size; ``--build-only`` builds what is missing and stops.

Each query goes through ``PostgresPostIndex.recall`` — the code the bot runs — and is compared with an
exact float32 search of the same (halfvec-rounded) vectors: recall@k, latency p50/p99 end to end and
on the server (EXPLAIN ANALYZE of the same statement), index and table bytes per post, build time,
and a numpy float32 brute-force scan timed in the same run. Then again with 10 % of the posts in a
restricted category, where every query must still return k rows (iterative scan). A plot of latency
and index size against the number of posts is written next to the JSON.

Every result records whether the server had huge pages (``huge_pages_status``): at 1024-d they halve
recall's latency (docs/performance.md). ``--huge-pages off,on`` measures each mode in the same run,
restarting the server between them; "on" needs huge pages reserved by the OS (``vm.nr_hugepages``, as
root), which the bench checks first and never changes itself.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from eval.bench import _recall_corpus as rc
from eval.bench.report import RESULTS, emit, print_table
from eval.stack.postgres import with_database
from worker.db.vector_index import HNSW_WITH, INDEX_NAMES, KINDS, VectorIndexKind
from worker.retrieval.recall import (
    _SETTINGS_SQL,
    PostgresPostIndex,
    recall_params,
    recall_sql,
    single_connection,
)
from worker.settings import RetrievalSettings

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / ".cache" / "pg-bench"
DEFAULTS = RetrievalSettings()  # type: ignore[call-arg]


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m eval.bench recall", description=__doc__)
    ap.add_argument("--sizes", default="425k", help="posts per size, comma-separated (100k,425k,1M,2M)")
    ap.add_argument("--n", type=int, default=0, help="one size, as a number (overrides --sizes)")
    ap.add_argument("--dim", type=int, default=1024, help="dimension (default 1024)")
    ap.add_argument("--kinds", default="halfvec,binary", help="vector index kinds, comma-separated")
    ap.add_argument("--halfvec-max", default="", help="largest size to build the halfvec index for")
    ap.add_argument("--queries", type=int, default=200, help="queries per configuration (default 200)")
    ap.add_argument("--k", type=int, default=25, help="rows per query (default 25)")
    ap.add_argument("--ef", default="40,100,200", help="halfvec: hnsw.ef_search values")
    ap.add_argument("--candidates", default="100,200,400", help="binary: binary_candidates values")
    ap.add_argument(
        "--binary-ef",
        default="0",
        help="binary: binary_ef_search values, each with every --candidates (0: as candidates, <= 1000)",
    )
    ap.add_argument(
        "--data-dir", type=Path, default=DATA_DIR, help="its PostgreSQL and cache (default .cache/pg-bench)"
    )
    ap.add_argument("--clusters", type=int, default=0, help="clusters (default n/250)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--latent", type=int, default=0, help="clusters in a LATENT-d subspace (default 0: isotropic, harder)"
    )
    ap.add_argument(
        "--storage",
        choices=["extended", "main", "plain"],
        default="main",
        help="the embedding column's storage (main: in the heap, the schema's since migration 0008; "
        "extended: TOAST, as before it)",
    )
    ap.add_argument("--brute-queries", type=int, default=20, help="queries timed on the numpy scan")
    ap.add_argument(
        "--hamming-ceiling",
        type=int,
        default=0,
        metavar="QUERIES",
        help="binary: also the recall of an exact Hamming scan (no graph) re-ranked, over this many queries",
    )
    ap.add_argument("--shared-buffers", default="3GB", help="server shared_buffers")
    ap.add_argument("--maintenance-work-mem", default="6GB", help="for the index builds")
    ap.add_argument(
        "--name", default="", help="results name (default recall, recall-scale for several sizes)"
    )
    ap.add_argument(
        "--extrapolate",
        default="2M",
        help="the plot goes on to this size along each line's measured slope, drawn as such ('' none)",
    )
    ap.add_argument(
        "--plot-from",
        default="",
        metavar="NAMES",
        help="measure nothing: redraw the plot (--name, default recall-scale) from these saved results "
        "(comma-separated names in eval/results/bench; a later one's kind at a size replaces an earlier)",
    )
    ap.add_argument(
        "--huge-pages",
        default="",
        metavar="MODES",
        help="measure with the server's huge_pages set to each of these in turn (off,try,on; default: "
        "as the server is, PostgreSQL's default try); the server is left at try",
    )
    ap.add_argument("--keep-server", action="store_true", help="leave the bench's PostgreSQL running")
    ap.add_argument("--build-only", action="store_true", help="build the missing tables and indexes, stop")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the tables and indexes even if cached")
    return ap.parse_args(argv)


def exact(vectors: np.ndarray, queries: np.ndarray, k: int, mask: np.ndarray | None) -> np.ndarray:
    """Exact top-k post ids (1-based) by cosine, float32, chunked so memory stays bounded."""
    best_ids = np.zeros((len(queries), 0), dtype=np.int64)
    best_sc = np.zeros((len(queries), 0), dtype=np.float32)
    for start in range(0, len(vectors), 100_000):
        block = vectors[start : start + 100_000]
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


def hamming_ceiling(
    vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, k: int, widths: list[int]
) -> dict[int, float]:
    """recall@k of the binary path with a perfect candidate scan: the exact Hamming top-``width`` of
    ``binary_quantize`` (a bit per positive coordinate), re-ranked by the exact cosine. Beside the
    index's figures it says whether a miss is the quantization's or the HNSW graph's."""
    bits = np.packbits(vectors > 0, axis=1)
    hits: dict[int, list[float]] = {w: [] for w in widths}
    for q, gold in zip(queries, truth, strict=True):
        distance = np.bitwise_count(np.bitwise_xor(bits, np.packbits(q > 0))).sum(axis=1, dtype=np.int32)
        widest = np.argpartition(distance, max(widths))[: max(widths)]
        ranked = widest[np.argsort(distance[widest], kind="stable")]
        for w in widths:
            candidates = ranked[:w]
            top = candidates[np.argsort(-(vectors[candidates] @ q))[:k]] + 1
            hits[w].append(len(set(top.tolist()) & set(gold.tolist())) / k)
    return {w: float(np.mean(h)) for w, h in hits.items()}


def time_brute_force(vectors: np.ndarray, queries: np.ndarray, k: int) -> list[float]:
    """Per-query latency of a numpy float32 brute-force scan over the whole corpus (the reference)."""
    times = []
    for q in queries:
        t0 = time.perf_counter()
        scores = vectors @ q
        top = np.argpartition(-scores, k - 1)[:k]
        _ranked = top[np.argsort(-scores[top])]
        times.append((time.perf_counter() - t0) * 1000)
    return times


def server_times(
    conn: psycopg.Connection, settings: RetrievalSettings, dim: int, queries: np.ndarray, k: int
) -> np.ndarray:
    """The server's own execution time of the same recall statement (EXPLAIN ANALYZE), in ms: beside
    the end-to-end figure it splits a query's latency into the index's share and the client's. Without
    per-node timing (``TIMING OFF``): its clock reads added 0.1-0.7 ms a query at 425k (issue 18)."""
    statement = "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + recall_sql(settings.vector_index, dim)
    times = []
    for q in queries:
        knobs, params = recall_params(settings, q, k)
        with conn.transaction():
            conn.execute(_SETTINGS_SQL, knobs)
            row = conn.execute(statement, params).fetchone()
        if row is None:
            raise RuntimeError("EXPLAIN returned no plan")
        times.append(float(row[0][0]["Execution Time"]))
    return np.asarray(times)


def run_queries(
    db_url: str, dim: int, settings: RetrievalSettings, queries: np.ndarray, truth: np.ndarray, k: int
) -> dict[str, Any]:
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        index = PostgresPostIndex(single_connection(conn), settings, model=rc.MODEL, dimension=dim)
        for q in queries[:10]:  # warm the connection and the prepared statement
            index.recall(q, k)
        lat, hits, rows = [], [], []
        for q, gold in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            got = index.recall(q, k)
            lat.append((time.perf_counter() - t0) * 1000)
            rows.append(len(got))
            hits.append(len({c.post_id for c in got} & set(gold.tolist())) / k)
        server = server_times(conn, settings, dim, queries, k)
    a = np.asarray(lat)
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "server_p50_ms": float(np.percentile(server, 50)),
        "server_p99_ms": float(np.percentile(server, 99)),
        "recall_at_k": float(np.mean(hits)),
        "min_rows": int(min(rows)),
    }


def sizes_on_disk(db_url: str) -> dict[str, int]:
    """Bytes of the table (heap, TOAST, maps) and of each vector index present."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_table_size('post_index')").fetchone()
        out = {"table": int(row[0]) if row else 0}
        for kind, name in INDEX_NAMES.items():
            got = conn.execute("SELECT pg_relation_size(to_regclass(%s))", (name,)).fetchone()
            if got and got[0]:
                out[kind] = int(got[0])
    return out


def configurations(kind: VectorIndexKind, args: argparse.Namespace) -> list[RetrievalSettings]:
    if kind == "halfvec":
        return [
            RetrievalSettings(vector_index="halfvec", ef_search=int(ef), recall_k=args.k)  # type: ignore[call-arg]
            for ef in args.ef.split(",")
        ]
    return [
        RetrievalSettings(  # type: ignore[call-arg]
            vector_index="binary", binary_candidates=int(c), binary_ef_search=int(ef), recall_k=args.k
        )
        for ef in args.binary_ef.split(",")
        for c in args.candidates.split(",")
    ]


def knob(s: RetrievalSettings) -> str:
    if s.vector_index == "halfvec":
        return f"ef_search={s.ef_search}"
    ef = f" ef_search={s.binary_ef_search}" if s.binary_ef_search else ""
    return f"candidates={s.binary_candidates}{ef}"


def is_default(s: RetrievalSettings) -> bool:
    return (
        s.ef_search == DEFAULTS.ef_search
        if s.vector_index == "halfvec"
        else (s.binary_candidates, s.binary_ef_search)
        == (DEFAULTS.binary_candidates, DEFAULTS.binary_ef_search)
    )


def measure_size(
    url: str, p: rc.Params, kinds: list[VectorIndexKind], args: argparse.Namespace, huge_pages: str
) -> dict[str, Any]:
    """Every configuration of every built kind at one size, against exact search and numpy; each
    result says whether the server had ``huge_pages``."""
    db_url = with_database(url, p.db_name)
    built = rc.built_indexes(db_url)
    vectors = rc.corpus(p)
    queries = rc.make_queries(p, args.queries)
    mask = rc.categories(p.n, p.seed) != rc.RESTRICTED_CATEGORY
    truth = exact(vectors, queries, args.k, None)
    truth_f = exact(vectors, queries, args.k, mask)
    brute = float(np.percentile(time_brute_force(vectors, queries[: args.brute_queries], args.k), 50))
    ceiling: dict[int, float] = {}
    if args.hamming_ceiling and "binary" in kinds:
        widths = sorted({max(args.k, int(c)) for c in args.candidates.split(",")})
        q = args.hamming_ceiling
        ceiling = hamming_ceiling(vectors, queries[:q], truth[:q], args.k, widths)
        print(f"exact Hamming scan, re-ranked, {q} queries: recall@{args.k} {ceiling}", flush=True)
    del vectors
    on_disk = sizes_on_disk(db_url)
    out: dict[str, Any] = {
        "n": p.n,
        "load_s": round(rc.load_seconds(db_url), 1),
        "table_bytes_per_post": round(on_disk["table"] / p.n, 1),
        "brute_force_p50_ms": round(brute, 2),
        "kinds": {},
    }
    for kind in kinds:
        if kind not in built:
            continue
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE index_meta SET vector_index = %s", (kind,))
            conn.execute("UPDATE categories SET read_restricted = false")
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            # The table first: where it exceeds shared_buffers, the index read last stays resident.
            conn.execute("SELECT pg_prewarm('post_index'), pg_prewarm(%s)", (INDEX_NAMES[kind],))
        results = []
        for settings in configurations(kind, args):
            r = run_queries(db_url, p.dim, settings, queries, truth, args.k)
            results.append(
                {
                    "filter": "none",
                    "knob": knob(settings),
                    "default": is_default(settings),
                    "huge_pages": huge_pages,
                    **r,
                }
            )
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE categories SET read_restricted = true WHERE category_id = %s",
                (rc.RESTRICTED_CATEGORY,),
            )
        try:
            for settings in configurations(kind, args):
                r = run_queries(db_url, p.dim, settings, queries, truth_f, args.k)
                results.append(
                    {
                        "filter": "10%",
                        "knob": knob(settings),
                        "default": is_default(settings),
                        "huge_pages": huge_pages,
                        **r,
                    }
                )
        finally:
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("UPDATE categories SET read_restricted = false")
        out["kinds"][kind] = {
            **(
                {"hamming_ceiling": {str(w): round(r, 4) for w, r in ceiling.items()}}
                if kind == "binary" and ceiling
                else {}
            ),
            "build_s": round(built[kind], 1),
            "index_bytes_per_post": round(on_disk[kind] / p.n, 1),
            "results": results,
        }
    return out


def extrapolate_size(args: argparse.Namespace) -> int:
    return rc.parse_size(args.extrapolate) if args.extrapolate else 0


def kinds_for(n: int, kinds: list[VectorIndexKind], halfvec_max: int) -> list[VectorIndexKind]:
    return [k for k in kinds if not (k == "halfvec" and halfvec_max and n > halfvec_max)]


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.plot_from:
        runs = [json.loads((RESULTS / f"{name}.json").read_text()) for name in args.plot_from.split(",")]
        plot(merge_runs(runs), RESULTS / f"{args.name or 'recall-scale'}.png", extrapolate_size(args))
        return 0
    sizes = [args.n] if args.n else [rc.parse_size(s) for s in args.sizes.split(",")]
    kinds: list[VectorIndexKind] = [k for k in KINDS if k in args.kinds.split(",")]
    halfvec_max = rc.parse_size(args.halfvec_max) if args.halfvec_max else 0
    params = [
        rc.Params(n, args.dim, args.clusters or max(1, n // 250), args.seed, args.latent, args.storage)
        for n in sizes
    ]
    modes = [m for m in args.huge_pages.split(",") if m]
    server, url = rc.start_server(args.data_dir, args.shared_buffers, keep=args.keep_server)
    measured: list[dict[str, Any]] = []
    try:
        for p in params:
            if args.rebuild or not rc.table_ready(url, p):
                rc.load_table(url, p)
            db_url = with_database(url, p.db_name)
            built = rc.built_indexes(db_url)
            for kind in kinds_for(p.n, kinds, halfvec_max):
                if args.rebuild or kind not in built:
                    rc.build_index(db_url, kind, p.dim, args.maintenance_work_mem)
        if args.build_only:
            return 0
        for mode in modes or [""]:
            if mode:
                url = rc.set_huge_pages(server, url, mode)
            status = rc.huge_pages_status(url)
            print(f"huge pages {status}" + (f" (huge_pages = {mode})" if mode else ""), flush=True)
            runs = [measure_size(url, p, kinds_for(p.n, kinds, halfvec_max), args, status) for p in params]
            measured = merge_runs([{"sizes": measured}, {"sizes": runs}], append=True)
    finally:
        if modes:
            rc.reset_huge_pages(url)
        server.stop()
    report(measured, args)
    return 0


def report(measured: list[dict[str, Any]], args: argparse.Namespace) -> None:
    load = round(os.getloadavg()[0], 2)
    graphs = ", ".join(f"{k} {w}" for k, w in HNSW_WITH.items())
    print(f"\n{args.dim}-d, HNSW {graphs}, {args.queries} queries, k={args.k}, load {load}")
    rows = []
    for m in measured:
        for kind, got in m["kinds"].items():
            for r in got["results"]:
                rows.append(
                    [
                        f"{m['n']:,}",
                        kind,
                        r["knob"],
                        r["filter"],
                        r.get("huge_pages", "?"),
                        r["p50_ms"],
                        r["p99_ms"],
                        r["server_p50_ms"],
                        r["server_p99_ms"],
                        r["recall_at_k"],
                        r["min_rows"],
                        m["brute_force_p50_ms"] / r["p50_ms"],
                    ]
                )
    print_table(
        [
            "posts",
            "index",
            "knob",
            "filter",
            "huge pages",
            "p50 ms",
            "p99 ms",
            "srv p50",
            "srv p99",
            f"recall@{args.k}",
            "min rows",
            "× numpy",
        ],
        rows,
    )
    print()
    print_table(
        ["posts", "index", "build s", "index B/post", "table B/post", "load s", "numpy p50 ms"],
        [
            [
                f"{m['n']:,}",
                kind,
                got["build_s"],
                got["index_bytes_per_post"],
                m["table_bytes_per_post"],
                m["load_s"],
                m["brute_force_p50_ms"],
            ]
            for m in measured
            for kind, got in m["kinds"].items()
        ],
    )
    name = "recall" if not args.latent else f"recall-latent{args.latent}"
    if len(measured) > 1:
        name += "-scale"
    name = args.name or name
    if len(measured) > 1:
        plot(measured, RESULTS / f"{name}.png", extrapolate_size(args))
    emit(
        name,
        {
            "shape": f"latent {args.latent}-d" if args.latent else "isotropic",
            "dim": args.dim,
            "queries": args.queries,
            "k": args.k,
            "sizes": measured,
            "targets": {
                "p50_ms": 2.0,
                "recall_at_k": 0.95,
                "filtered_rows": args.k,
                "index_memory_vs_halfvec": 0.25,
            },
            "load_average": load,
            "cpus": os.cpu_count(),
        },
    )


def merge_runs(runs: list[dict[str, Any]], *, append: bool = False) -> list[dict[str, Any]]:
    """The sizes of several saved runs (``emit``'s JSON) as one measurement: a later run's kind at a
    size replaces an earlier one's (``append``: adds its results to the earlier ones, as the huge-page
    modes of one run do), its per-size figures (numpy, table bytes) likewise."""
    by_n: dict[int, dict[str, Any]] = {}
    for run in runs:
        for m in run["sizes"]:
            merged = by_n.setdefault(m["n"], {"kinds": {}})
            merged.update({k: v for k, v in m.items() if k != "kinds"})
            for kind, got in m["kinds"].items():
                if append and kind in merged["kinds"]:
                    earlier = merged["kinds"][kind]["results"]
                    merged["kinds"][kind] = {**got, "results": earlier + got["results"]}
                else:
                    merged["kinds"][kind] = got
    return [by_n[n] for n in sorted(by_n)]


def plotted(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The result a size's line shows: the default knob, unfiltered, with huge pages where the run
    measured them (older saved runs do not say: theirs had none)."""
    default = [r for r in results if r["default"] and r["filter"] == "none"]
    return next((r for r in default if r.get("huge_pages") == "on"), default[0] if default else None)


def extrapolate(points: list[tuple[int, float]], to: int) -> float | None:
    """``y`` at ``to`` along the least-squares log-log slope of the measured points (None: fewer than
    two sizes, or ``to`` not beyond them)."""
    if len({n for n, _ in points}) < 2 or to <= max(n for n, _ in points) or min(y for _, y in points) <= 0:
        return None
    x = np.log([n for n, _ in points])
    y = np.log([v for _, v in points])
    slope, intercept = np.polyfit(x, y, 1)
    return float(np.exp(intercept + slope * np.log(to)))


def plot(measured: list[dict[str, Any]], path: Path, extrapolate_to: int = 0) -> dict[str, float]:
    """Latency (default settings, unfiltered) and index bytes against the number of posts; past the
    largest size measured, each line goes on to ``extrapolate_to`` along its measured slope, dashed to a
    hollow marker. Returns the extrapolated values ("kind figure" -> value)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    extrapolated: dict[str, float] = {}

    def line(
        ax: Any, points: list[tuple[int, float]], label: str, style: str, marker: str, colour: str
    ) -> None:
        ax.plot(
            [n for n, _ in points], [y for _, y in points], style, marker=marker, label=label, color=colour
        )
        guess = extrapolate(points, extrapolate_to) if extrapolate_to else None
        if guess is None:
            return
        extrapolated[label] = guess
        ax.plot([points[-1][0], extrapolate_to], [points[-1][1], guess], ":", color=colour, alpha=0.8)
        ax.plot([extrapolate_to], [guess], marker="o", mfc="none", color=colour, linestyle="none")

    points = [(m["n"], m["brute_force_p50_ms"]) for m in measured]
    line(left, points, "numpy brute force", "-", "x", "black")
    for kind, colour in zip(KINDS, ("tab:blue", "tab:orange"), strict=True):
        pts = [
            (m["n"], r, m["kinds"][kind]["index_bytes_per_post"] * m["n"] / 2**30)
            for m in measured
            if kind in m["kinds"]
            for r in [plotted(m["kinds"][kind]["results"])]
            if r is not None
        ]
        if not pts:
            continue
        line(left, [(n, r["p50_ms"]) for n, r, _ in pts], f"{kind} p50 end to end", "-", "o", colour)
        line(left, [(n, r["server_p50_ms"]) for n, r, _ in pts], f"{kind} p50 server", "--", ".", colour)
        line(right, [(n, gb) for n, _, gb in pts], f"{kind} HNSW index", "-", "o", colour)
    table = [(m["n"], m["table_bytes_per_post"] * m["n"] / 2**30) for m in measured]
    line(right, table, "table (heap)", "--", "x", "grey")  # dashed: at 1024-d the halfvec index's twin
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("posts")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylabel("ms per query")
    right.set_ylabel("GiB")
    left.set_title("recall latency (default knobs)")
    right.set_title("index and table size")
    if extrapolated:
        fig.text(
            0.5,
            0.005,
            f"filled: measured; dotted to a hollow marker: extrapolated to {extrapolate_to:,} posts "
            "along the least-squares slope of the sizes measured",
            ha="center",
            fontsize=8,
        )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot: {path}")
    for label, value in extrapolated.items():
        print(f"  extrapolated to {extrapolate_to:,}: {label} {value:.3g}")
    return extrapolated
