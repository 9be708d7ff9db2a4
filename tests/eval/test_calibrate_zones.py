from __future__ import annotations

from pathlib import Path

import pytest

from eval.evaluation.evaluate import Outcome
from eval.evaluation.thresholds import calibrate, plot_calibration, propose_abstain, propose_weak


def outcome(qid: str, logit: float, *, ood: bool = False, right: bool = True) -> Outcome:
    return Outcome(
        question_id=qid,
        config="posts+keyword+rerank",
        answerable=not ood,
        tags=("out_of_domain",) if ood else ("answerable",),
        metrics={},
        topic_rank=None if ood else (1 if right else 3),
        post_rank=None,
        top_logit=logit,
        zone="normal",
        latency_ms=1.0,
        sources=(),
        fallbacks=(),
    )


def test_proposed_abstain_threshold_abstains_on_at_most_five_percent() -> None:
    answerable = [float(i) for i in range(40)]  # 0..39: 5 % of 40 = 2 may abstain
    t = propose_abstain(answerable)
    assert t == 2.0
    assert sum(v < t for v in answerable) == 2


def test_proposed_weak_threshold_reaches_the_precision() -> None:
    # logits 0..19: top-1 right only from 10 up; 10 questions at ≥ 10 are all right
    ans = [(float(i), i >= 10) for i in range(20)]
    assert propose_weak(ans, [], floor=-10, target=0.8) == pytest.approx(8.0)  # 10 right of 12 ≥ 0.8
    assert propose_weak(ans, [], floor=-10, target=1.01) is None


def test_calibration_figures_at_current_and_proposed_thresholds(tmp_path: Path) -> None:
    outcomes = [outcome(f"a{i}", 1.0 + i * 0.1) for i in range(20)]
    outcomes += [outcome("wrong", -3.0, right=False)]
    outcomes += [outcome(f"o{i}", -6.0 + i, ood=True) for i in range(4)]  # -6, -5, -4, -3
    cal = calibrate(outcomes, abstain_below=-4.0, weak_below=0.0)
    cur = cal["current"]
    assert cal["answerable_n"] == 21
    assert cal["ood_n"] == 4
    assert cur["ood_recall"] == 0.5  # -6 and -5 abstain; -4 is weak
    assert cur["precision"] == 1.0
    assert cur["answerable_abstained_rate"] == 0.0
    assert cur["normal_precision"] == 1.0  # the 20 right ones are ≥ 0
    prop = cal["proposed"]
    # 5 % of 21 = 1 answerable may abstain: threshold = the 2nd lowest answerable logit (1.0)
    assert prop["abstain_below"] == 1.0
    assert prop["answerable_abstained_rate"] == pytest.approx(1 / 21, abs=1e-4)
    assert prop["ood_recall"] == 1.0
    png = plot_calibration(cal, tmp_path / "zones.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
