"""The embedding layer's linear head: a logistic regression over question embeddings.

``python -m eval.bench gate_intent train --head linear`` fits it on:

- harmful (label 1): the harmful exemplars (``gate/intent/exemplars.jsonl``) and the harmful lines
  of the gate's regression sets (``tests/gate/*.jsonl``: blind sets 1, 2, 3 and 5, the held-out
  and labelled cases; never ``eval/data/gate-heldout/``, which stays for measuring);
- benign (label 0): the benign exemplars and look-alikes of the same files, and real forum text
  (the 1,000 forum questions of ``python -m eval.bench gate`` and the archive posts already
  embedded in ``.cache/gate-intent/``).

Each of the three groups weighs the same in the loss whatever its size (harmful, look-alikes,
forum), with an L2 penalty; fitted by Newton's method (IRLS), so the result is deterministic.
The threshold, on the logit, is the highest of: the top forum score + ``--margin``, and the score
that lets at most ``--benign-rate`` of the look-alikes through. The forum texts are training data
too, so that part of the calibration is in sample (``docs/gate.md`` says so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gate.intent import BENIGN

REPO = Path(__file__).resolve().parents[2]
REGRESSION_SETS = REPO / "tests" / "gate"


@dataclass(frozen=True, slots=True)
class Head:
    weights: Any
    bias: float


def fit_logistic(x: Any, y: Any, weight: Any, *, l2: float, steps: int = 25) -> Head:
    """Weighted, L2-penalised logistic regression (bias not penalised), by Newton's method."""
    n, d = x.shape
    design = np.hstack([x.astype(np.float64), np.ones((n, 1))])
    beta = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ beta)))
        gradient = design.T @ (weight * (p - y)) + penalty * beta
        curvature = (design * (weight * p * (1 - p))[:, None]).T @ design + np.diag(penalty + 1e-9)
        step = np.linalg.solve(curvature, gradient)
        beta -= step
        if float(np.abs(step).max()) < 1e-7:
            break
    return Head(weights=beta[:-1].astype(np.float32), bias=float(beta[-1]))


def regression_rows() -> list[dict[str, Any]]:
    rows = []
    for path in sorted(REGRESSION_SETS.glob("*.jsonl")):
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows


def training_set(
    exemplar_rows: Sequence[dict[str, str]],
    exemplar_vectors: Any,
    regression: Sequence[dict[str, Any]],
    regression_vectors: Any,
    forum_vectors: Any,
) -> tuple[Any, Any, Any, Any]:
    """(x, y, weight, group): harmful, look-alikes and forum text (``group`` 0, 1, 2), each group
    summing to one third of the weight."""
    harmful = [v for r, v in zip(exemplar_rows, exemplar_vectors, strict=True) if r["label"] != BENIGN]
    look_alikes = [v for r, v in zip(exemplar_rows, exemplar_vectors, strict=True) if r["label"] == BENIGN]
    harmful += [v for r, v in zip(regression, regression_vectors, strict=True) if r["expect"] == "block"]
    look_alikes += [v for r, v in zip(regression, regression_vectors, strict=True) if r["expect"] == "pass"]
    groups = [(np.asarray(harmful), 1.0), (np.asarray(look_alikes), 0.0), (np.asarray(forum_vectors), 0.0)]
    x = np.vstack([g for g, _ in groups])
    y = np.concatenate([np.full(len(g), label) for g, label in groups])
    weight = np.concatenate([np.full(len(g), len(x) / (3 * len(g))) for g, _ in groups])
    group = np.concatenate([np.full(len(g), i) for i, (g, _) in enumerate(groups)])
    return x, y, weight, group


HARMFUL, LOOK_ALIKE, FORUM_TEXT = 0, 1, 2


def out_of_fold_logits(x: Any, y: Any, weight: Any, *, l2: float, folds: int = 5) -> Any:
    """Each row's logit from a head fitted without its fold (rows dealt to folds in turn): how the
    head scores questions it was not fitted on, for calibrating the threshold."""
    fold = np.arange(len(x)) % folds
    logits = np.zeros(len(x))
    for k in range(folds):
        head = fit_logistic(x[fold != k], y[fold != k], weight[fold != k], l2=l2)
        logits[fold == k] = x[fold == k] @ head.weights + head.bias
    return logits
