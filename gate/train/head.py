"""The embedding layer's linear head: a logistic regression over question embeddings.

``gate.train.intent`` (``make gate``) fits it on:

- harmful (label 1) and look-alikes (label 0): the lines of ``gate/train/data.py`` (the
  same lines as the lexical head: exemplars, regression sets, held-out sets already tuned on, the
  training sets; never an untuned held-out set);
- forum text (label 0): the 1,000 forum questions of ``python -m eval.bench gate`` and every post
  of the Urho3D archive, each embedded as a question (hard negatives: short, contentless replies
  land near harmful requests in MiniLM's space).

Each of the three groups weighs the same in the loss whatever its size (harmful, look-alikes,
forum), with an L2 penalty; fitted by Newton's method (IRLS), so the result is deterministic.
The threshold, on the logit, is the highest of: the top forum score + ``--margin``, and the score
that lets at most ``--benign-rate`` of the look-alikes through out of fold. The forum texts are
training data too, so the first part is in sample; ``gate.train.intent`` also reports the forum
texts' false blocks out of fold (``docs/gate.md`` says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


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


def training_set(harmful: Any, look_alikes: Any, forum: Any) -> tuple[Any, Any, Any, Any]:
    """(x, y, weight, group): harmful lines, look-alikes and forum text (``group`` 0, 1, 2), each
    group summing to one third of the weight."""
    groups = [(np.asarray(harmful), 1.0), (np.asarray(look_alikes), 0.0), (np.asarray(forum), 0.0)]
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
