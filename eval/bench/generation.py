"""``python -m eval.bench generation``: prompt assembly and the offline generator on real forum posts.

For each development question of the Urho3D archive, six sources are built from real posts: the
accepted answer and five distractors (accepted answers of other questions), the answer placed at rank
1…6 in turn. Measured: prompt size and build time at two budgets (and the build time of a naive
concatenation without fencing or budget, as the reference), citation validity, and how often the
offline generator cites the accepted answer compared with a positional reference that always cites
sources 1–3.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from eval.bench.report import emit, print_table
from worker.domain import Source
from worker.generation.offline import OfflineGenerator
from worker.generation.prompt import build_prompt
from worker.html_text import html_to_text

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "urho3d"
_MARKER = re.compile(r"\[\[([\d,\s]+)\]\]")


def _load(data: Path, limit: int) -> list[tuple[str, Source]]:
    """(question, gold source) pairs, the source's excerpt being the accepted answer's text."""
    out: list[tuple[str, Source]] = []
    with (data / "eval" / "questions-dev.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            topic = json.loads(
                (data / "topics" / f"{row['gold_topic_ids'][0]}.json").read_text(encoding="utf-8")
            )
            posts = {p["id"]: p for p in topic["post_stream"]["posts"]}
            post = posts.get(row["gold_post_ids"][0])
            if post is None:
                continue
            source = Source(
                0,
                post["id"],
                topic["id"],
                post["post_number"],
                topic["slug"],
                topic["title"],
                html_to_text(post["cooked"])[:1500],
            )
            out.append((row["question"], source))
            if len(out) >= limit:
                break
    return out


def _cited(text: str) -> set[int]:
    return {int(n) for m in _MARKER.finditer(text) for n in re.findall(r"\d+", m.group(1))}


def _naive(question: str, sources: list[Source]) -> list[dict[str, str]]:
    evidence = "\n".join(f"[[{s.n}]] {s.title}\n{s.excerpt}" for s in sources)
    return [
        {"role": "system", "content": "You are citebot."},
        {"role": "user", "content": f"{evidence}\n\n{question}"},
    ]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.bench generation", description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=348)
    args = parser.parse_args(argv)
    pairs = _load(args.data, args.limit)
    generator = OfflineGenerator()
    budgets = (6000, 2000)
    build_ms: dict[int, list[float]] = {b: [] for b in budgets}
    tokens: dict[int, list[float]] = {b: [] for b in budgets}
    truncated = dict.fromkeys(budgets, 0)
    kept: dict[int, list[float]] = {b: [] for b in budgets}
    naive_ms: list[float] = []
    valid = gold_offline = gold_first = gold_positional = gen_count = 0
    gen_ms: list[float] = []
    for i, (question, gold) in enumerate(pairs):
        others = [pairs[(i + k) % len(pairs)][1] for k in range(1, 6)]
        rank = i % 6
        ordered = [*others[:rank], gold, *others[rank:]]
        sources = [
            Source(n, s.post_id, s.topic_id, s.post_number, s.slug, s.title, s.excerpt)
            for n, s in enumerate(ordered, start=1)
        ]
        gold_n = rank + 1
        t0 = time.perf_counter()
        _naive(question, sources)
        naive_ms.append((time.perf_counter() - t0) * 1000)
        for budget in budgets:
            t0 = time.perf_counter()
            prompt = build_prompt(
                question, sources, "normal", bot_name="citebot", forum_name="Urho3D", token_budget=budget
            )
            build_ms[budget].append((time.perf_counter() - t0) * 1000)
            tokens[budget].append(prompt.tokens)
            truncated[budget] += prompt.truncated
            kept[budget].append(len(prompt.sources_used))
            if budget == budgets[0]:
                t0 = time.perf_counter()
                completion = generator.complete(prompt.messages)
                gen_ms.append((time.perf_counter() - t0) * 1000)
                cited = _cited(completion.text)
                allowed = {s.n for s in prompt.sources_used}
                gen_count += 1
                valid += cited <= allowed and bool(cited)
                gold_offline += gold_n in cited
                first = _MARKER.search(completion.text)
                gold_first += bool(first) and first is not None and _cited(first.group(0)) == {gold_n}
                gold_positional += gold_n <= 3
    n = len(pairs)
    rows = []
    for budget in budgets:
        rows.append(
            [
                f"build_prompt @ {budget}",
                statistics.median(build_ms[budget]),
                _pct(build_ms[budget], 0.95),
                statistics.median(tokens[budget]),
                _pct(tokens[budget], 0.95),
                truncated[budget] / n,
                statistics.mean(kept[budget]),
            ]
        )
    rows.append(
        ["naive concat (reference)", statistics.median(naive_ms), _pct(naive_ms, 0.95), "-", "-", "-", 6]
    )
    print(f"{n} questions, 6 sources each (accepted answer + 5 distractors, answer at rank 1..6 in turn)\n")
    print_table(["stage", "p50 ms", "p95 ms", "p50 tokens", "p95 tokens", "truncated", "sources kept"], rows)
    print()
    offline_rate, positional_rate = gold_offline / gen_count, gold_positional / gen_count
    print_table(
        [
            "generator",
            "answers",
            "citations valid",
            "cites the answer",
            "first point is the answer",
            "p50 ms",
        ],
        [
            [
                "offline extractive",
                gen_count,
                valid / gen_count,
                offline_rate,
                gold_first / gen_count,
                statistics.median(gen_ms),
            ],
            ["positional: cite 1-3 (reference)", gen_count, 1.0, positional_rate, 1 / 6, 0.0],
        ],
    )
    figures = {
        "questions": n,
        "build_p50_ms_6000": round(statistics.median(build_ms[6000]), 3),
        "build_p50_ms_2000": round(statistics.median(build_ms[2000]), 3),
        "naive_p50_ms": round(statistics.median(naive_ms), 4),
        "tokens_p50_6000": statistics.median(tokens[6000]),
        "tokens_p95_6000": _pct(tokens[6000], 0.95),
        "truncated_6000": round(truncated[6000] / n, 4),
        "truncated_2000": round(truncated[2000] / n, 4),
        "sources_kept_2000": round(statistics.mean(kept[2000]), 3),
        "offline_citations_valid": round(valid / gen_count, 4),
        "offline_cites_answer": round(offline_rate, 4),
        "positional_cites_answer": round(positional_rate, 4),
        "ratio_offline_vs_positional": round(offline_rate / positional_rate, 3),
        "offline_first_point_answer": round(gold_first / gen_count, 4),
        "offline_p50_ms": round(statistics.median(gen_ms), 3),
    }
    emit("generation", figures)
    return 0
