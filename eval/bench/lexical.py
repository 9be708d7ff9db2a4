"""``python -m eval.bench lexical``: the lexical channel's cost beside the cosine channel's, by size.

For each size (``--sizes 36k,425k``) the bench fills ``post_index`` (the real schema, migration 0004's
generated ``lexical`` column and its GIN index) in its own embedded PostgreSQL (``.cache/pg-bench-lex``)
with the forum export's real posts, prepared as the backfill prepares them (``backfill.prepare``); a
size above the export's count repeats its posts under new ids (the 425k forum: the archive about 11.5
times over, so every word's posting list grows with the size). The vectors are synthetic (unit,
seeded; the recall bench's) over an HNSW index built with the worker's DDL: the cosine channel's cost
does not depend on what the vectors mean. Tables and indexes are cached per size.

Each dev question (long and short forms) then runs, in the same process and order:

- **cosine channel**: the question embedded by the configured local model (MiniLM) and recalled by
  ``PostgresPostIndex.recall`` (``stage_k`` rows, as the shipped path asks);
- **lexical channel**: ``PostgresLexicalIndex.search`` (``lexical_k`` rows), the code the bot runs.

Reported: p50 / p90 of each, their ratio (the issue's target: lexical p50 at most 1.5x cosine's), and
the server's time of the lexical statement (EXPLAIN ANALYZE) on a few questions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from backfill.prepare import Preparer, Truncator
from backfill.sources.file import FileSource
from eval.bench.report import emit, print_table
from eval.stack.postgres import EmbeddedPostgres, ensure_database
from worker.clients.embeddings import embedder_for
from worker.db.migrate import migrate
from worker.db.vector_index import drop_vector_indexes, index_ddl
from worker.retrieval.lexical import POSTS_SQL, PostgresLexicalIndex, match_terms, search_params, search_sql
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / ".cache" / "pg-bench-lex"
DB_PREFIX = "citebot_bench_lexical"
REPLICA_STRIDE = 10_000_000  # post and topic ids of the n-th copy of the archive: + n * stride


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m eval.bench lexical", description=__doc__)
    ap.add_argument("--forum", type=Path, default=ROOT.parent / "shared" / "data" / "urho3d")
    ap.add_argument("--sizes", default="36k,425k", help="posts per size (36k: the archive once)")
    ap.add_argument("--questions", type=Path, action="append", default=[])
    ap.add_argument("--limit", type=int, default=200, help="questions (long forms; each with its short)")
    ap.add_argument("--explain", type=int, default=5, help="questions whose lexical SQL is EXPLAINed")
    ap.add_argument("--out", default="lexical", help="result name under eval/results/bench/")
    return ap.parse_args(argv)


def archive_rows(forum: Path, settings: Settings) -> list[tuple[Any, ...]]:
    """The export's eligible posts as the backfill prepares them (text cut by characters)."""
    source = FileSource(forum, assume_public=True)
    prep = Preparer(settings.embeddings.model, Truncator(settings.embeddings.max_tokens))
    rows = []
    for batch in source.read(None, batch_size=2000):
        for post in batch.posts:
            p = prep.prepare(post)
            if isinstance(p, str):
                continue
            rows.append(
                (post.post_id, post.topic_id, post.post_number, post.topic_slug, post.topic_title, p.text)
            )
    return rows


def size_of(text: str, archive: int) -> int:
    t = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    n = int(float(t[:-1] if scale > 1 else t) * scale)
    return archive if abs(n - archive) < 0.05 * archive else n


def build(url: str, n: int, rows: list[tuple[Any, ...]], dim: int) -> str:
    """The size's database (cached: a finished load leaves ``bench_params``)."""
    name = f"{DB_PREFIX}_{n}"
    db_url = ensure_database(url, name)
    with psycopg.connect(db_url, autocommit=True) as conn:
        have = conn.execute("SELECT to_regclass('bench_params') IS NOT NULL").fetchone()
        if have and have[0]:
            return db_url
    db_url = ensure_database(url, name, fresh=True)
    settings = Settings.model_validate(
        {"database": {"url": db_url}, "embeddings": {"model": "bench-lexical", "dimension": dim}}
    )
    migrate(settings)
    rng = np.random.default_rng(7)
    t0 = time.perf_counter()
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        drop_vector_indexes(conn)
        conn.execute("DROP INDEX IF EXISTS post_index_lexical_gin")
        copy_sql = (
            "COPY post_index (post_id, topic_id, post_number, topic_slug, topic_title, category_id, text,"
            " digest, model, embedding) FROM STDIN (FORMAT BINARY)"
        )
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            copy.set_types(
                ["bigint", "bigint", "integer", "text", "text", "bigint", "text", "bytea", "text", "halfvec"]
            )
            done = 0
            while done < n:
                copy_no = done // len(rows)
                for pid, tid, num, slug, title, text in rows[: n - done]:
                    vec = rng.standard_normal(dim).astype(np.float32)
                    vec /= np.linalg.norm(vec)
                    shift = copy_no * REPLICA_STRIDE
                    copy.write_row(
                        (
                            pid + shift,
                            tid + shift,
                            num,
                            slug,
                            title,
                            1,
                            text,
                            b"\0",
                            "bench-lexical",
                            HalfVector(vec),
                        )
                    )
                    done += 1
        conn.execute(
            "INSERT INTO categories (category_id, read_restricted, seen_by) VALUES (1, false, 'bench')"
        )
        conn.commit()
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        conn.execute("CREATE INDEX post_index_lexical_gin ON post_index USING gin (lexical)")
        gin_s = time.perf_counter() - t1
        conn.execute(index_ddl("halfvec", dim))
        conn.execute("VACUUM ANALYZE post_index")
        conn.execute("CREATE TABLE bench_params (n int, load_s float8, gin_s float8, total_s float8)")
        conn.execute(
            "INSERT INTO bench_params VALUES (%s, %s, %s, %s)", (n, load_s, gin_s, time.perf_counter() - t0)
        )
    print(
        f"built {n:,} posts: load {load_s:.0f} s, GIN {gin_s:.0f} s, total {time.perf_counter() - t0:.0f} s"
    )
    return db_url


def load_questions(paths: list[Path], limit: int) -> list[str]:
    from worker.calibration.questions import first_sentence

    out: list[str] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                if q.get("gold_post_ids"):
                    out.append(q["question"])
    out = out[:limit]
    return out + [s for s in (first_sentence(q) for q in out) if s]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def measure(db_url: str, n: int, questions: list[str], settings: Settings, explain: int) -> dict[str, Any]:
    s = settings.retrieval
    embedder = embedder_for(settings.embeddings, None)
    embedder.embed(["warm up"], kind="query")
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        connections = single_connection(conn)
        index = PostgresPostIndex(
            connections, s, model="bench-lexical", dimension=settings.embeddings.dimension
        )
        lexical = PostgresLexicalIndex(connections)
        lexical.search("warm up the statistics", s.lexical_k)  # ts_stat runs once an hour
        cosine_ms, lexical_ms, hits = [], [], []
        for q in questions:
            t0 = time.perf_counter()
            vec = embedder.embed([q], kind="query")[0]
            index.recall(vec, max(s.recall_k, s.stage_k), ())
            t1 = time.perf_counter()
            found = lexical.search(q, s.lexical_k, ())
            t2 = time.perf_counter()
            cosine_ms.append((t1 - t0) * 1000)
            lexical_ms.append((t2 - t1) * 1000)
            hits.append(len(found.candidates))
        server = []
        stats = lexical._stats()
        for q in questions[:explain]:
            terms = lexical.terms(conn, q, stats)
            row = conn.execute(POSTS_SQL).fetchone()
            params = search_params(
                terms, s.lexical_k, (), match_terms(terms, stats, int(row[0]) if row else 0)
            )
            if params is None:
                continue
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + search_sql(len(terms)), params).fetchone()
            server.append(float(plan[0][0]["Execution Time"]) if plan else float("nan"))
    c50, l50 = statistics.median(cosine_ms), statistics.median(lexical_ms)
    return {
        "posts": n,
        "questions": len(questions),
        "cosine_p50_ms": round(c50, 1),
        "cosine_p90_ms": round(pct(cosine_ms, 90), 1),
        "lexical_p50_ms": round(l50, 1),
        "lexical_p90_ms": round(pct(lexical_ms, 90), 1),
        "ratio_p50": round(l50 / c50, 2),
        "lexical_hits_p50": statistics.median(hits),
        "lexical_server_ms": [round(x, 1) for x in server],
    }


def main(argv: list[str]) -> int:
    args = parse(argv)
    settings = Settings.model_validate({"discourse": {"base_url": "http://bench.invalid"}})
    questions_files = args.questions or [args.forum / "eval" / "questions-dev.jsonl"]
    questions = load_questions(questions_files, args.limit)
    rows = archive_rows(args.forum, settings)
    server = EmbeddedPostgres(DATA_DIR)
    url = server.start()
    try:
        results = []
        for size in args.sizes.split(","):
            n = size_of(size, len(rows))
            db_url = build(url, n, rows, settings.embeddings.dimension)
            results.append(measure(db_url, n, questions, settings, args.explain))
            print(json.dumps(results[-1]))
    finally:
        server.stop()
    print_table(
        ["posts", "cosine p50", "lexical p50", "ratio", "cosine p90", "lexical p90"],
        [
            [
                r["posts"],
                r["cosine_p50_ms"],
                r["lexical_p50_ms"],
                r["ratio_p50"],
                r["cosine_p90_ms"],
                r["lexical_p90_ms"],
            ]
            for r in results
        ],
    )
    emit(args.out, {"sizes": results, "archive_posts": len(rows), "model": settings.embeddings.model})
    return 0
