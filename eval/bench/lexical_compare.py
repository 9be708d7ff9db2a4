"""``python -m eval.bench lexical_compare``: the lexical statement before issue 35 against today's, by budget.

Over the lexical bench's cached database of one size (``python -m eval.bench lexical`` builds it), each
dev question (and its short form) is searched by the statement before issue 35 (``BEFORE_SQL``: one row
per (post, term) pair, summed in a hash aggregate) and by ``PostgresLexicalIndex.search`` with each
postings budget (``--budgets``; ``0``: no budget). Reported per variant: p50 / p90, how many top-50
lists are identical to the old one's (post ids and scores to 4 decimals), and the mean and smallest
overlap of the top 10 and top 50.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from eval.bench.lexical import DATA_DIR, DB_PREFIX, load_questions
from eval.bench.report import emit
from eval.stack.postgres import EmbeddedPostgres, with_database
from worker.retrieval.eligibility import ELIGIBLE
from worker.retrieval.lexical import WEIGHTS, PostgresLexicalIndex, tsquery_any
from worker.retrieval.recall import single_connection

ROOT = Path(__file__).resolve().parents[2]
BEFORE_SQL = f"""
WITH terms AS (
    SELECT t.term, t.idf, quote_literal(t.term)::tsquery AS q
    FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS t(term, idf)
), hits AS MATERIALIZED (
    SELECT p.post_id, p.lexical
    FROM post_index p
    WHERE p.lexical @@ %(any)s::tsquery
      AND {ELIGIBLE}
), scored AS (
    SELECT h.post_id, sum(t.idf * ts_rank(%(weights)s::float4[], h.lexical, t.q, 1)) AS score
    FROM hits h CROSS JOIN terms t
    GROUP BY h.post_id
    ORDER BY score DESC, h.post_id
    LIMIT %(k)s
)
SELECT s.post_id, s.score FROM scored s ORDER BY s.score DESC, s.post_id
"""  # noqa: S608 - constants only


def overlap(a: list[int], b: list[int]) -> float:
    return len(set(a) & set(b)) / max(1, len(b))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench lexical_compare", description=__doc__)
    ap.add_argument("--forum", type=Path, default=ROOT.parent / "shared" / "data" / "urho3d")
    ap.add_argument("--posts", type=int, default=36285, help="the cached size to read")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--budgets", default="0,12000,8000,6000,5000")
    args = ap.parse_args(argv)
    questions = load_questions([args.forum / "eval" / "questions-dev.jsonl"], args.limit)
    server = EmbeddedPostgres(DATA_DIR)
    url = with_database(server.start(), f"{DB_PREFIX}_{args.posts}")
    rows: list[dict[str, Any]] = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            connections = single_connection(conn)
            reference = PostgresLexicalIndex(connections)
            stats = reference._stats
            before: list[list[tuple[int, float]]] = []
            times = []
            for q in questions:
                terms = reference.terms(conn, q, stats())
                t0 = time.perf_counter()
                found = (
                    conn.execute(
                        BEFORE_SQL,
                        {
                            "terms": [t for t, _ in terms],
                            "idf": [w for _, w in terms],
                            "any": tsquery_any([t for t, _ in terms]),
                            "weights": WEIGHTS,
                            "k": 50,
                        },
                    ).fetchall()
                    if terms
                    else []
                )
                times.append((time.perf_counter() - t0) * 1000)
                before.append([(int(r[0]), round(float(r[1]), 4)) for r in found])
            rows.append({"variant": "before", "p50_ms": round(statistics.median(times), 1)})
            for budget in (int(b) for b in args.budgets.split(",")):
                index = PostgresLexicalIndex(connections, stats=stats, budget=budget or 10**12)
                times, lists = [], []
                for q in questions:
                    t0 = time.perf_counter()
                    found_now = index.search(q, 50).candidates
                    times.append((time.perf_counter() - t0) * 1000)
                    lists.append([(c.post_id, round(c.lexical or 0.0, 4)) for c in found_now])
                o10 = [
                    overlap([p for p, _ in a[:10]], [p for p, _ in b[:10]])
                    for a, b in zip(lists, before, strict=True)
                ]
                o50 = [
                    overlap([p for p, _ in a], [p for p, _ in b]) for a, b in zip(lists, before, strict=True)
                ]
                rows.append(
                    {
                        "variant": f"budget {budget}" if budget else "no budget",
                        "p50_ms": round(statistics.median(times), 1),
                        "p90_ms": round(sorted(times)[int(0.9 * len(times))], 1),
                        "identical": sum(a == b for a, b in zip(lists, before, strict=True)),
                        "top10_overlap_mean": round(statistics.mean(o10), 3),
                        "top10_overlap_min": round(min(o10), 2),
                        "top50_overlap_mean": round(statistics.mean(o50), 3),
                        "top50_overlap_min": round(min(o50), 2),
                    }
                )
                print(json.dumps(rows[-1]))
    finally:
        server.stop()
    emit("lexical-compare", {"posts": args.posts, "questions": len(questions), "variants": rows})
    return 0
