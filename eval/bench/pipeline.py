"""``python -m eval.bench pipeline``: end-to-end retrieval latency over loopback services.

Everything real, nothing faked: the local model server (TEI's contract over the packaged MiniLM;
rerank by its calibrated cosine unless a cross-encoder is configured) serves ``/embed`` and
``/rerank``; the local forum server (Discourse's ``/search.json`` over its own PostgreSQL) serves the
keyword channel; an embedded PostgreSQL + pgvector holds the post index of a Urho3D sample, embedded
through the same model server. Each development question runs the full ``Retriever`` (embed + recall
‖ keyword → fuse → hydrate → rerank of 25 → aggregate); the trace gives each stage's time.

Reference in the same run: the sequential cost (sum of every stage) against the measured total, i.e.
what running the keyword branch beside embed + recall saves; and the legacy path (keyword only).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from eval.bench.report import emit, print_table
from eval.evaluation.datasets import URHO3D
from eval.stack.modelserver.models import BiEncoderScorer, Calibration, EmbeddingModel
from eval.stack.modelserver.server import ModelServerThread, load_models
from eval.stack.services import EmbeddedStack
from worker.clients.discourse import DiscourseClient
from worker.clients.embeddings import TeiEmbedder
from worker.clients.tei import TeiReranker
from worker.errors import ConfigError
from worker.html_text import html_to_text
from worker.retrieval.keyword import PostgresTermStats, TermSelector
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.settings import RerankerSettings

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
DATA = URHO3D
STAGES = ("index_check", "embed", "recall", "keyword", "fuse", "hydrate", "rerank", "aggregate")
TEXT_CHARS = 1500


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m eval.bench pipeline", description=__doc__)
    ap.add_argument("--topics", type=int, default=300, help="forum topics indexed (default 300)")
    ap.add_argument("--queries", type=int, default=40, help="development questions timed (default 40)")
    ap.add_argument("--data", type=Path, default=DATA, help="forum export folder (topics/, raw/, eval/)")
    return ap.parse_args(argv)


def sample(data: Path, topics: int, queries: int) -> tuple[list[int], list[dict[str, Any]]]:
    """The first ``queries`` development questions, and their gold topics plus evenly spread others."""
    lines = (data / "eval" / "questions-dev.jsonl").read_text("utf-8").splitlines()
    qs = [json.loads(line) for line in lines[:queries]]
    gold = {t for q in qs for t in q["gold_topic_ids"]}
    others = sorted(int(p.stem) for p in (data / "topics").glob("*.json") if int(p.stem) not in gold)
    step = max(1, len(others) // max(1, topics - len(gold)))
    chosen = sorted(gold | set(others[::step][: max(0, topics - len(gold))]))
    return chosen, qs


def make_export(data: Path, topic_ids: list[int]) -> Path:
    """A forum export folder holding only the sample (symlinks into the full archive)."""
    export = CACHE / f"bench-pipeline-export-{len(topic_ids)}"
    for sub in ("topics", "raw"):
        (export / sub).mkdir(parents=True, exist_ok=True)
    for tid in topic_ids:
        for sub, ext in (("topics", "json"), ("raw", "md")):
            src, dst = data / sub / f"{tid}.{ext}", export / sub / f"{tid}.{ext}"
            if src.exists() and not dst.exists():
                dst.symlink_to(src)
    return export


def build_index(db_url: str, embedder: TeiEmbedder, data: Path, topic_ids: list[int]) -> int:
    rows = []
    for tid in topic_ids:
        topic = json.loads((data / "topics" / f"{tid}.json").read_text("utf-8"))
        for post in topic["post_stream"]["posts"]:
            body = html_to_text(post.get("cooked") or "")
            if body and post.get("post_type", 1) == 1:
                text = f"{topic['title']}\n\n{body}"[:TEXT_CHARS]
                rows.append(
                    (
                        post["id"],
                        tid,
                        post["post_number"],
                        topic["slug"],
                        topic["title"],
                        text,
                        topic.get("category_id"),
                    )
                )
    t0 = time.perf_counter()
    vectors = embedder.embed([r[5] for r in rows])
    print(f"embedded {len(rows)} posts in {time.perf_counter() - t0:.0f} s")
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY post_index (post_id, topic_id, post_number, topic_slug, topic_title, text, category_id,"
                " digest, model, embedding) FROM STDIN"
            ) as copy,
        ):
            for row, vec in zip(rows, vectors, strict=True):
                copy.write_row((*row, b"\0", embedder.model, HalfVector(np.asarray(vec, dtype=np.float32))))
        # The archive is of a public forum: its categories are public (backfill.categories).
        conn.execute(
            "INSERT INTO categories (category_id, read_restricted, seen_by)"
            " SELECT DISTINCT category_id, false, 'bench' FROM post_index WHERE category_id IS NOT NULL"
            " ON CONFLICT (category_id) DO NOTHING"
        )
        conn.execute("ANALYZE post_index")
        conn.commit()
    return len(rows)


def model_server() -> tuple[ModelServerThread, str]:
    """The model server; without a fitted calibration file, a placeholder one (latency is the same,
    only the logits' meaning — hence the zones — would be off, and the report says so)."""
    try:
        return ModelServerThread(*load_models()), "fitted"
    except ConfigError:
        embedding = EmbeddingModel()
        placeholder = Calibration(a=10.0, b=-5.0, model_id=embedding.model_id)
        return ModelServerThread(embedding, BiEncoderScorer(embedding, placeholder)), "placeholder"


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def main(argv: list[str]) -> int:
    args = parse(argv)
    topic_ids, questions = sample(args.data, args.topics, args.queries)
    export = make_export(args.data, topic_ids)
    t0 = time.perf_counter()
    models, calibration = model_server()
    stack = EmbeddedStack(
        export,
        cache=CACHE / "pg-bench-pipeline",
        name="bench",
        rerank_timeout_s=RerankerSettings.model_fields["timeout_s"].default,
        models=models,
        fresh_index=True,
    )
    with stack as endpoints:
        print(f"stack (forum, model server, PostgreSQL) up in {time.perf_counter() - t0:.1f} s")
        settings = endpoints.settings
        index_db = settings.database.url
        http = httpx.Client(timeout=httpx.Timeout(30.0))
        embedder = TeiEmbedder(http, settings.embeddings)
        posts = build_index(index_db, embedder, args.data, topic_ids)
        rerank_http = httpx.Client(timeout=httpx.Timeout(settings.reranker.timeout_s))
        reranker = TeiReranker(rerank_http, settings.reranker)
        search = DiscourseClient(http, settings.discourse)
        with psycopg.connect(index_db, autocommit=True) as conn:
            register_vector(conn)
            source = single_connection(conn)
            index = PostgresPostIndex(
                source, settings.retrieval, model=embedder.model, dimension=embedder.dimension
            )
            terms = TermSelector(settings.retrieval.keyword_max_terms, stats=PostgresTermStats(source))
            with Retriever(embedder, index, search, reranker, settings.retrieval, terms=terms) as retriever:
                for q in questions[:3]:  # warm every connection, model and cache
                    retriever.retrieve(q["question"], exclude_post_ids=q["exclude_post_ids"])
                stage_ms: dict[str, list[float]] = {s: [] for s in STAGES}
                totals, sequential, legacy, hits, fallbacks = [], [], [], 0, 0
                for q in questions:
                    t0 = time.perf_counter()
                    result = retriever.retrieve(q["question"], exclude_post_ids=q["exclude_post_ids"])
                    totals.append((time.perf_counter() - t0) * 1000)
                    durations = {st.name: st.duration_ms for st in result.trace.stages}
                    for name in STAGES:
                        stage_ms[name].append(durations.get(name, 0.0))
                    sequential.append(sum(durations.values()))
                    hits += bool(set(q["gold_topic_ids"]) & {s.topic_id for s in result.sources})
                    fallbacks += len(result.trace.fallbacks)
                    t0 = time.perf_counter()
                    retriever.retrieve(
                        q["question"], exclude_post_ids=q["exclude_post_ids"], route=Route(posts=False)
                    )
                    legacy.append((time.perf_counter() - t0) * 1000)

    mean_total = float(np.mean(totals))
    rows = [
        [name, pct(v, 50), pct(v, 99), 100 * float(np.mean(v)) / mean_total]
        for name, v in stage_ms.items()
        if any(v)
    ]
    rows.append(["total (measured)", pct(totals, 50), pct(totals, 99), 100.0])
    rows.append(
        [
            "sum of stages (sequential)",
            pct(sequential, 50),
            pct(sequential, 99),
            100 * float(np.mean(sequential)) / mean_total,
        ]
    )
    rows.append(
        ["legacy (keyword only)", pct(legacy, 50), pct(legacy, 99), 100 * float(np.mean(legacy)) / mean_total]
    )
    print(
        f"\n{len(questions)} questions, {posts} posts of {len(topic_ids)} topics, MiniLM on the local "
        f"model server, reranker {reranker.name} (calibration {calibration});"
        f" load average {os.getloadavg()[0]:.1f}\n"
    )
    print_table(["stage", "p50 ms", "p99 ms", "share of total %"], rows)
    emit(
        "pipeline",
        {
            "questions": len(questions),
            "posts": posts,
            "topics": len(topic_ids),
            "p50_ms": round(pct(totals, 50), 2),
            "p99_ms": round(pct(totals, 99), 2),
            "sequential_p50_ms": round(pct(sequential, 50), 2),
            "concurrency_saving": round(1 - float(np.mean(totals)) / float(np.mean(sequential)), 3),
            "legacy_p50_ms": round(pct(legacy, 50), 2),
            "stages": {
                name: {
                    "p50_ms": round(pct(v, 50), 2),
                    "p99_ms": round(pct(v, 99), 2),
                    "share": round(float(np.mean(v)) / mean_total, 3),
                }
                for name, v in stage_ms.items()
            },
            "hit_at_6_topic": round(hits / len(questions), 3),
            "fallbacks": fallbacks,
            "calibration": calibration,
            "load_average": round(os.getloadavg()[0], 2),
        },
    )
    return 0
