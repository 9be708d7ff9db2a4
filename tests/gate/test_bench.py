"""Smoke test of ``python -m eval.bench gate``'s pieces on a few forum questions (no results written)."""

from __future__ import annotations

from eval.bench.gate import FORUM, PROBES, forum_questions, percentile, probe_texts, time_each
from gate import Gate
from gate.train.data import cooked_to_text


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


def test_interleaved_times_each_check_on_each_text() -> None:
    from eval.bench.gate_compare import interleaved

    calls: list[str] = []
    measured = interleaved((lambda t: calls.append("a" + t), lambda t: calls.append("b" + t)), ["x", "y"], 2)
    assert calls[:4] == ["ax", "ax", "bx", "bx"]  # alternated run by run (a wall run and a CPU run each)
    assert len(calls) == 16
    assert [(len(wall), len(cpu)) for wall, cpu in measured] == [(2, 2), (2, 2)]
    assert all(t >= 0 for wall, cpu in measured for t in wall + cpu)
