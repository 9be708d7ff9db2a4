"""``python -m eval.bench backfill [--n 425000]``: throughput of the backfill pipeline without a model.

The pipeline (synthetic source → prepare → digest lookup → null embedder with fixed vectors → binary
COPY, straight into ``post_index`` for a range it does not hold yet, else staging + upsert →
checkpoint) runs over ``--n`` synthetic posts of realistic size
into a fresh database of its own embedded PostgreSQL (``.cache/pg-bench-backfill``), then the HNSW index is
built. Reference, in the same run: a raw binary COPY of the same rows into a bare table (rows/s), so
``ratio`` says how much of the database's raw speed the whole pipeline keeps. Memory: the process's
RSS and peak RSS sampled every 50,000 posts must stay flat in the number of posts.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg

from backfill.categories import CategoryList
from backfill.run import BackfillOptions, run_backfill
from backfill.sources import SourceBatch, SourcePost
from backfill.store import pack_halfvecs
from eval.bench.report import emit, print_table
from eval.stack.postgres import EmbeddedPostgres, ensure_database
from worker.db.migrate import migrate
from worker.domain import ForumCategory
from worker.settings import Settings
from worker.testing.models import FakeEmbedder

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "citebot_bench_backfill"
SAMPLE_EVERY = 50_000
WORDS = tuple(
    [
        "the",
        "scene",
        "node",
        "renders",
        "a",
        "model",
        "with",
        "shadows",
        "when",
        "the",
        "light",
        "casts",
        "them",
        "and",
        "the",
        "camera",
        "looks",
        "at",
        "the",
        "material",
        "texture",
        "shader",
        "physics",
        "body",
        "collision",
        "script",
        "event",
        "handler",
        "update",
        "frame",
        "time",
    ]
)


def rss_mb() -> float:
    """Resident memory now (Linux ``/proc/self/statm``), in MiB."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return pages * resource.getpagesize() / 2**20


def _proc_cpu_s(pid: int, *, children: bool) -> float:
    """User + system CPU seconds of ``pid`` (``/proc/PID/stat``), with its reaped children's when asked."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu_s(url: str) -> float:
    """CPU seconds the PostgreSQL server at ``url`` has used: its postmaster, the backends it has reaped,
    and the processes still running (Linux ``/proc``; the server runs on this machine)."""
    with psycopg.connect(url) as conn:
        # Read while the backend is alive: once the connection is closed, its /proc entry may be gone.
        backend = conn.info.backend_pid
        postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    total = _proc_cpu_s(postmaster, children=True)
    for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
        try:
            total += _proc_cpu_s(int(child), children=False)
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile: counted in the postmaster's reaped children
    return total


def own_cpu_s() -> float:
    """CPU seconds of this process, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cooked_for(i: int) -> str:
    """A post of ~600 characters; one in 10 has a code block, one in 7 quotes another post."""
    words = [WORDS[(i * 7 + k * 13) % len(WORDS)] for k in range(90)]
    body = f"<p>{' '.join(words[:45])} &amp; more.</p>\n"
    body += f"<p>{' '.join(words[45:])}, see <code>Node::Update</code>.</p>"
    if i % 7 == 0:
        body = (
            '<aside class="quote"><div class="title">bob:</div><blockquote><p>How?</p></blockquote></aside>'
            + body
        )
    if i % 10 == 0:
        body += "<pre><code>" + "node->SetPosition(Vector3(0, 1, 0));\n" * 8 + "</code></pre>"
    return body


class SyntheticSource:
    """``n`` posts generated on the fly (nothing held in memory), ascending ids, with memory samples."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.samples: list[tuple[int, float, float]] = []

    @property
    def key(self) -> str:
        return "bench"

    def categories(self) -> CategoryList | None:
        """Categories 1..12 public (the posts'), 99 restricted."""
        cats = [ForumCategory(c, f"Category {c}", False) for c in range(1, 13)]
        return CategoryList((*cats, ForumCategory(99, None, True)))

    def estimate(self, cursor: int | None) -> int | None:
        return self.n - (cursor or 0)

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        start = (cursor or 0) + 1
        for lo in range(start, self.n + 1, batch_size):
            hi = min(self.n, lo + batch_size - 1)
            posts = tuple(
                SourcePost(
                    post_id=i, topic_id=1 + i // 8, post_number=1 + i % 8, topic_slug=f"topic-{i // 8}",
                    topic_title=f"Topic {i // 8}: rendering question", category_id=1 + i % 12,
                    category_name=f"Category {1 + i % 12}", tags=("rendering", "bench"), cooked=cooked_for(i),
                    username=f"user{i % 500}", updated_at="2024-01-01T00:00:00+00:00",
                    reply_to_post_number=None if i % 8 == 0 else 1,
                )
                for i in range(lo, hi + 1)
            )  # fmt: skip
            if lo // SAMPLE_EVERY != (hi + 1) // SAMPLE_EVERY or hi == self.n:
                self.samples.append((hi, rss_mb(), peak_mb()))
            yield SourceBatch(posts, lo, hi, hi)


def raw_copy_rate(url: str, n: int, dimension: int) -> tuple[float, float, float]:
    """Rows/s of a bare binary COPY of post-sized rows (text, digest, halfvec) into an unindexed table,
    with the CPU µs per row of this process and of the server."""
    chunk = 2000
    vectors = pack_halfvecs(np.full((chunk, dimension), 1.0 / np.sqrt(dimension), np.float32))
    texts = [f"Topic {i}: rendering question\nCategory 1\n\n" + cooked_for(i)[:500] for i in range(chunk)]
    digests = [hashlib.sha256(t.encode()).digest() for t in texts]
    with psycopg.connect(url) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy_ref")
        conn.execute("CREATE UNLOGGED TABLE bench_copy_ref (LIKE post_index INCLUDING DEFAULTS)")
        conn.execute("ALTER TABLE bench_copy_ref SET LOGGED")
        conn.commit()
        cpu0, server0 = own_cpu_s(), server_cpu_s(url)
        start = time.perf_counter()
        for base in range(0, n, chunk):
            with conn.cursor().copy(
                "COPY bench_copy_ref (post_id, topic_id, post_number, topic_slug, topic_title, text, digest,"
                " model, embedding) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                # The vectors as the pipeline sends them: pgvector's binary form, passed through as bytes.
                copy.set_types(["int8", "int8", "int4", "text", "text", "text", "bytea", "text", "bytea"])
                for k in range(min(chunk, n - base)):
                    i = base + k
                    copy.write_row((i, i // 8, 1, "slug", "title", texts[k], digests[k], "null", vectors[k]))
            conn.commit()
        elapsed = time.perf_counter() - start
        cpu, server = own_cpu_s() - cpu0, server_cpu_s(url) - server0
        conn.execute("DROP TABLE bench_copy_ref")
        conn.commit()
    return n / elapsed, cpu / n * 1e6, server / n * 1e6


def _table_mb(url: str) -> float:
    """post_index's heap and TOAST, without its indexes, in MiB."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_table_size('post_index')").fetchone()
    return round(int(row[0]) / 2**20, 1) if row else float("nan")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.bench backfill", description=__doc__)
    parser.add_argument("--n", type=int, default=425_000, help="synthetic posts")
    parser.add_argument("--dimension", type=int, default=1024, help="vector dimension (bge-m3: 1024)")
    parser.add_argument("--page-size", type=int, default=2000, help="posts per commit")
    parser.add_argument("--no-index", action="store_true", help="skip the HNSW build (minutes at 425k)")
    parser.add_argument("--writers", type=int, default=BackfillOptions().writers, help="writer connections")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    server = EmbeddedPostgres(ROOT / ".cache" / "pg-bench-backfill")
    admin = server.start()
    try:
        url = ensure_database(admin, DATABASE, fresh=True)
        settings = Settings.model_validate(
            {"database": {"url": url}, "embeddings": {"model": "null", "dimension": args.dimension}}
        )
        migrate(settings)
        if args.no_index:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DROP INDEX post_index_embedding_hnsw")
        ref_rate, ref_own_us, ref_server_us = raw_copy_rate(url, min(args.n, 100_000), args.dimension)
        source = SyntheticSource(args.n)
        embedder = FakeEmbedder(model="null", dimension=args.dimension, fixed=True)
        options = BackfillOptions(
            page_size=args.page_size,
            batch_size=256,
            concurrency=2,
            writers=args.writers,
            max_tokens=512,
            progress=False,
            build_index=not args.no_index,
        )
        cpu0, server0 = own_cpu_s(), server_cpu_s(url)
        summary = run_backfill(settings.database, source, embedder, options)
        run_own_s, run_server_s = own_cpu_s() - cpu0, server_cpu_s(url) - server0
        table_mb = _table_mb(url)
        # Second pass: every digest matches, nothing is embedded or written (the steady state).
        again = run_backfill(settings.database, SyntheticSource(args.n), embedder, options)
    finally:
        server.stop()

    t = summary.timings
    load_s = summary.duration_s - t.get("index_build", 0.0)
    rate = summary.seen / load_s
    rows = [
        ("read (synthetic source)", t["read"], summary.seen / max(t["read"], 1e-9)),
        ("prepare (html→text, digest)", t["prepare"], summary.seen / max(t["prepare"], 1e-9)),
        ("digest lookup", t["digest_lookup"], summary.seen / max(t["digest_lookup"], 1e-9)),
        ("embed wait (null embedder)", t["embed_wait"], summary.seen / max(t["embed_wait"], 1e-9)),
        ("COPY + upsert + checkpoint", t["write"], summary.seen / max(t["write"], 1e-9)),
        ("pipeline before index build", load_s, rate),
        ("HNSW index build", t.get("index_build", 0.0), summary.seen / max(t.get("index_build", 0.0), 1e-9)),
        ("raw binary COPY (reference)", float("nan"), ref_rate),
        ("second pass (all unchanged)", again.duration_s, again.seen / max(again.duration_s, 1e-9)),
    ]
    print(f"backfill pipeline, {summary.seen:,} synthetic posts, halfvec({args.dimension}), null embedder")
    print_table(["stage", "seconds", "posts/s"], rows)
    print()
    print_table(["posts read", "RSS MiB", "peak RSS MiB"], source.samples)
    rss = [s[1] for s in source.samples]
    figures = {
        "n": summary.seen,
        "dimension": args.dimension,
        "writers": args.writers,
        "embedded": summary.embedded,
        "ineligible": summary.ineligible,
        "posts_per_s_before_index": round(rate),
        "target_posts_per_s": 10_000,
        "meets_target": rate >= 10_000,
        "raw_copy_rows_per_s": round(ref_rate),
        "ratio_to_raw_copy": round(rate / ref_rate, 3),
        "stage_s": {k: round(v, 2) for k, v in t.items()},
        # CPU per post of the whole run (the index build's included unless --no-index) and per row of
        # the raw COPY: the bench process (every thread) and the PostgreSQL server (every backend).
        "cpu_us_per_post": {
            "bench": round(run_own_s / summary.seen * 1e6),
            "postgres": round(run_server_s / summary.seen * 1e6),
        },
        "raw_copy_cpu_us_per_row": {"bench": round(ref_own_us), "postgres": round(ref_server_us)},
        "cores": os.cpu_count(),
        "index_build_s": round(t.get("index_build", 0.0), 1),
        "second_pass_posts_per_s": round(again.seen / max(again.duration_s, 1e-9)),
        "second_pass_embedded": again.embedded,
        "rss_mb_samples": [[s[0], round(s[1], 1)] for s in source.samples],
        "rss_growth_mb_after_first_sample": round(max(rss) - rss[0], 1) if rss else None,
        "peak_rss_mb": round(peak_mb(), 1),
        "table_mb": table_mb,
    }
    emit("backfill", figures)
    return 0
