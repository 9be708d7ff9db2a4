"""``python -m eval fit-stage``: fit the second stage's weights on the forum's solved topics.

The fitting half of the development questions (``Question.half == "fit"``, long and short forms) runs
through the second-stage configuration with provisional weights (cosine alone: the candidate set, the
first ``stage_k`` fused posts, does not depend on the weights). Every candidate's features and whether
it is an accepted answer of the question's topic are collected; a logistic regression (L2, Newton's
method, standardised features) gives the weights, written with the fit's figures to
``worker/retrieval/stage_weights.json`` under the run's model set. The ``test`` half is never seen
here: ``python -m eval retrieval`` reports the held-out figures.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from eval.evaluation.configs import CONFIGS, STAGE, Config
from eval.evaluation.datasets import Question
from eval.evaluation.runner import RetrievalRun, run_retrieval
from worker.retrieval.pipeline import RetrievalResult
from worker.retrieval.stage import FEATURES, StageModel, feature_rows, model_set_id, write_model

log = logging.getLogger(__name__)

L2 = 1.0


def logistic_regression(
    x: np.ndarray, y: np.ndarray, *, l2: float = L2, iterations: int = 100
) -> tuple[np.ndarray, float]:
    """Weights and bias minimising the log-loss + ``l2``/2 · |w|² (bias not penalised), by Newton."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(xb @ w)))
        grad = xb.T @ (p - y) + penalty * w
        hess = xb.T @ (xb * (p * (1 - p))[:, None]) + np.diag(penalty) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return w[:-1], float(w[-1])


def provisional(model_set: str) -> StageModel:
    """Cosine alone (the fused candidates in cosine order): what the features are collected under."""
    d = len(FEATURES)
    weights = tuple(1.0 if f == "cosine" else 0.0 for f in FEATURES)
    return StageModel(model_set, FEATURES, weights, (0.0,) * d, (1.0,) * d)


def fit_stage(run: RetrievalRun, model_set: str, *, l2: float = L2, write: bool = True) -> dict[str, Any]:
    """Collect the fit half's candidate features, fit, and (``write``) record the weights."""
    xs: list[list[float]] = []
    ys: list[float] = []
    questions: set[str] = set()
    found: set[str] = set()

    def collect(q: Question, config: Config, result: RetrievalResult) -> None:
        if not q.answerable:
            return
        head = [c for c in result.candidates if c.stage is not None]
        gold = set(q.gold_post_ids)
        questions.add(q.id)
        for cand, row in zip(head, feature_rows(head), strict=True):
            xs.append([row[f] for f in FEATURES])
            ys.append(1.0 if cand.post_id in gold else 0.0)
            if cand.post_id in gold:
                found.add(q.id)

    stage_run = replace(
        run,
        configs=(CONFIGS[STAGE],),
        half="fit",
        stage_model=provisional(model_set),
        collect=collect,
        write_thresholds=False,
    )
    results = run_retrieval(stage_run)
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if not len(y) or y.sum() == 0:
        raise ValueError("no accepted answer among the fit half's candidates: nothing to fit")
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std <= 1e-9] = 1.0
    weights, bias = logistic_regression((x - mean) / std, y, l2=l2)
    model = StageModel(model_set, FEATURES, tuple(float(w) for w in weights), tuple(mean), tuple(std), bias)
    figures = {
        "fitted": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "method": f"logistic regression (L2 {l2}) on standardised features; label: the post is an "
        "accepted answer of the question's topic",
        "data": ", ".join(Path(q).name for q in run.questions)
        + f" — the fit half only (long and short forms); forum {results['meta']['forum']} "
        f"({results['meta']['posts_indexed']} posts)",
        "questions": len(questions),
        "questions_with_answer_in_candidates": len(found),
        "candidates": len(y),
        "positives": int(y.sum()),
    }
    if write:
        write_model(model, figures)
        log.info("second-stage weights for %s written", model_set)
    return {"model": model.as_dict(), **figures}


def model_set_for(embedding_model: str) -> str:
    return model_set_id(embedding_model)
