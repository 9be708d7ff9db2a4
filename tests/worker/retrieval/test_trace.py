from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from worker.trace import Trace


def ticking(step: float) -> Iterator[float]:
    t = 0.0
    while True:
        yield t
        t += step


def test_trace_serialises_stages_scores_and_fallbacks() -> None:
    clock = ticking(0.001)  # every clock read advances 1 ms
    trace = Trace(clock=lambda: next(clock))
    with trace.stage("recall") as st:
        st.counts = {"rows": 25}
        st.scores([0.91234567, None, 0.5, 0.4, 0.3, 0.2, 0.1])
    with pytest.raises(RuntimeError), trace.stage("rerank") as st:
        raise RuntimeError("boom")
    trace.fallback("rerank", "reranker failed: timeout")
    trace.info["config"] = {"posts": True}

    data = json.loads(trace.to_json())
    assert [s["name"] for s in data["stages"]] == ["recall", "rerank"]
    recall, rerank = data["stages"]
    assert recall["counts"] == {"rows": 25}
    assert recall["top_scores"] == [0.9123, 0.5, 0.4, 0.3, 0.2]
    assert recall["start_ms"] == pytest.approx(1.0)
    assert recall["duration_ms"] == pytest.approx(1.0)
    assert rerank["error"] == "RuntimeError"
    assert rerank["start_ms"] == pytest.approx(3.0)
    assert data["fallbacks"] == [{"stage": "rerank", "reason": "reranker failed: timeout"}]
    assert data["info"] == {"config": {"posts": True}}
    assert data["total_ms"] == pytest.approx(4.0)
    assert trace.get("recall") is not None
    assert trace.get("missing") is None


def test_an_empty_trace_is_valid_json() -> None:
    data = json.loads(Trace().to_json())
    assert data == {"total_ms": 0.0, "stages": [], "fallbacks": []}
