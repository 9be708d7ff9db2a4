"""Smoke test of ``python -m eval.bench gate``'s pieces on a few forum questions (no results written)."""

from __future__ import annotations

from eval.bench.gate import FORUM, PROBES, cooked_to_text, forum_questions, percentile, probe_texts, time_each
from gate import Gate


def test_cooked_to_text() -> None:
    assert cooked_to_text("<p>Hi &amp; <b>bye</b></p>\n<p>x</p>") == "Hi & bye x"


def test_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) in {50.0, 51.0}
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0


def test_bench_runs_on_a_few_items() -> None:
    questions = forum_questions(FORUM, limit=5)
    assert len(questions) == 5
    assert all(isinstance(q, str) and q for q in questions)
    probes = probe_texts(PROBES)
    assert len(probes) == 60
    gate = Gate.load()
    times = time_each(gate.check, questions + probes[:3], repeat=1)
    assert len(times) == 8
    assert all(t > 0 for t in times)
