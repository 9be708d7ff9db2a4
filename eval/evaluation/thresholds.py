"""Zone calibration: where should ``abstain_below`` and ``weak_below`` sit for the configured reranker?

From the full pipeline's top-1 rerank logit of each question: answerable questions should rarely
abstain, out-of-domain ones should. Figures at the current thresholds, and proposed ones:

- ``abstain_below``: the highest threshold that abstains on at most ``max_abstained`` (5 %) of the
  answerable questions; its out-of-domain recall says how much abstention that buys.
- ``weak_below``: the lowest threshold above which the top-1 source is in a gold topic for at least
  ``normal_precision`` (80 %) of the questions scoring there (out-of-domain ones count as wrong).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.evaluation.datasets import half_of, slice_of
from eval.evaluation.evaluate import Outcome
from eval.evaluation.metrics import percentile
from worker.calibration.fit import MAX_ABSTAINED, NORMAL_PRECISION, propose_abstain, propose_weak


def _figures(
    ans: Sequence[tuple[float, bool]], ood: Sequence[float], abstain_below: float, weak_below: float
) -> dict[str, float]:
    ans_abstained = sum(1 for v, _ in ans if v < abstain_below)
    ood_abstained = sum(1 for v in ood if v < abstain_below)
    normal = [right for v, right in ans if v >= weak_below] + [False for v in ood if v >= weak_below]
    abstained = ans_abstained + ood_abstained
    return {
        "abstain_below": round(abstain_below, 3),
        "weak_below": round(weak_below, 3),
        "ood_recall": round(ood_abstained / len(ood), 4) if ood else 0.0,
        "precision": round(ood_abstained / abstained, 4) if abstained else 0.0,
        "answerable_abstained_rate": round(ans_abstained / len(ans), 4) if ans else 0.0,
        "ood_weak_or_abstain": round(sum(1 for v in ood if v < weak_below) / len(ood), 4) if ood else 0.0,
        "normal_share": round(len(normal) / (len(ans) + len(ood)), 4) if ans or ood else 0.0,
        "normal_precision": round(sum(normal) / len(normal), 4) if normal else 0.0,
    }


def _points(outcomes: Sequence[Outcome]) -> tuple[list[tuple[float, bool]], list[float]]:
    ans = [(o.top_logit, o.topic_rank == 1) for o in outcomes if o.answerable and o.top_logit is not None]
    ood = [o.top_logit for o in outcomes if "out_of_domain" in o.tags and o.top_logit is not None]
    return ans, ood


def propose(outcomes: Sequence[Outcome], weak_below: float) -> tuple[float, float, bool]:
    """(abstain_below, weak_below, weak found) proposed from ``outcomes``: ``abstain_below`` abstains
    on at most 5 % of each answerable slice (long and short questions alike)."""
    ans, ood = _points(outcomes)
    by_slice: dict[str, list[float]] = {}
    for o in outcomes:
        if o.answerable and o.top_logit is not None:
            by_slice.setdefault(slice_of(o.tags), []).append(o.top_logit)
    abstain = min(propose_abstain(v) for v in by_slice.values())
    weak = propose_weak(ans, ood, abstain)
    return abstain, weak if weak is not None else max(weak_below, abstain), weak is not None


def slice_abstention(outcomes: Sequence[Outcome], abstain_below: float) -> dict[str, dict[str, float]]:
    """Share of each slice (long, short, ood, near_domain) whose top-1 score is below ``abstain_below``."""
    groups: dict[str, list[float]] = {}
    for o in outcomes:
        if o.top_logit is not None:
            groups.setdefault(slice_of(o.tags), []).append(o.top_logit)
    return {
        name: {"n": len(v), "abstained": round(sum(x < abstain_below for x in v) / len(v), 4)}
        for name, v in sorted(groups.items())
    }


def heldout(outcomes: Sequence[Outcome], abstain_below: float, weak_below: float) -> dict[str, Any]:
    """Thresholds proposed from the ``fit`` half, judged on the untouched ``test`` half (per slice)."""
    fit = [o for o in outcomes if half_of(o.question_id) == "fit"]
    test = [o for o in outcomes if half_of(o.question_id) == "test"]
    if not _points(fit)[0]:
        return {}
    judged = "test"
    if not _points(test)[0]:  # a run over the fit half alone: figures in sample
        test, judged = fit, "fit (in sample)"
    abstain, weak, _ = propose(fit, weak_below)
    ans, ood = _points(test)
    return {
        "fitted_on": "fit",
        "judged_on": judged,
        "proposed": _figures(ans, ood, abstain, weak),
        "current": _figures(ans, ood, abstain_below, weak_below),
        "slices_proposed": slice_abstention(test, abstain),
        "slices_current": slice_abstention(test, abstain_below),
    }


def calibrate(outcomes: Sequence[Outcome], abstain_below: float, weak_below: float) -> dict[str, Any]:
    """Figures and proposed thresholds from one reranking configuration's outcomes."""
    ans, ood = _points(outcomes)
    if not ans:
        return {"answerable_n": 0, "ood_n": len(ood)}
    ans_values = [v for v, _ in ans]
    abstain = propose_abstain(ans_values)
    weak = propose_weak(ans, ood, abstain)
    return {
        "config": outcomes[0].config if outcomes else None,
        "answerable_n": len(ans),
        "ood_n": len(ood),
        "answerable_median": round(percentile(ans_values, 50), 3),
        "ood_median": round(percentile(ood, 50), 3),
        "answerable_p5": round(percentile(ans_values, 5), 3),
        "ood_p95": round(percentile(ood, 95), 3),
        "current": _figures(ans, ood, abstain_below, weak_below),
        "proposed": _figures(ans, ood, abstain, weak if weak is not None else max(weak_below, abstain)),
        "weak_found": weak is not None,
        "heldout": heldout(outcomes, abstain_below, weak_below),
        "method": (
            f"Proposed abstain_below = the highest threshold abstaining on ≤ {MAX_ABSTAINED:.0%} of "
            f"answerable questions; proposed weak_below = the lowest threshold above which the top-1 source "
            f"is in a gold topic for ≥ {NORMAL_PRECISION:.0%} of questions (out-of-domain count as wrong)"
            + ("" if weak is not None else "; none reaches it, so weak_below is kept")
            + "."
        ),
        "answerable_logits": [round(v, 3) for v in ans_values],
        "answerable_top1_right": [right for _, right in ans],
        "ood_logits": [round(v, 3) for v in ood],
    }


def plot_calibration(cal: dict[str, Any], path: Path) -> Path:
    """Histogram of top-1 logits: answerable (top-1 right / wrong) vs out of domain, thresholds drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ans = cal["answerable_logits"]
    right = [v for v, ok in zip(ans, cal["answerable_top1_right"], strict=True) if ok]
    wrong = [v for v, ok in zip(ans, cal["answerable_top1_right"], strict=True) if not ok]
    ood = cal["ood_logits"]
    every = ans + ood
    lo, hi = min([*every, -5.0]), max([*every, 1.0])
    bins = [lo + (hi - lo) * i / 40 for i in range(41)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = ["answerable, top-1 topic right", "answerable, top-1 wrong"]
    ax.hist(
        [right, wrong], bins=bins, stacked=True, label=labels, color=["tab:green", "tab:olive"], alpha=0.8
    )
    ax.hist(ood, bins=bins, label="out of domain", color="tab:red", alpha=0.6)
    cur, prop = cal["current"], cal["proposed"]
    for x, style, label in (
        (cur["abstain_below"], "-", f"abstain_below {cur['abstain_below']:.2f} (current)"),
        (cur["weak_below"], "-", f"weak_below {cur['weak_below']:.2f} (current)"),
        (prop["abstain_below"], "--", f"abstain_below {prop['abstain_below']:.2f} (proposed)"),
        (prop["weak_below"], ":", f"weak_below {prop['weak_below']:.2f} (proposed)"),
    ):
        ax.axvline(x, color="black", linestyle=style, linewidth=1, label=label)
    ax.set_xlabel("top-1 rerank logit (full pipeline)")
    ax.set_ylabel("questions")
    ax.set_title(
        f"Zone calibration: {cal['answerable_n']} answerable vs {cal['ood_n']} out-of-domain questions"
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
