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
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from eval.evaluation.configs import CONFIGS, STAGE, STAGE_EXCERPT, Config
from eval.evaluation.datasets import Question
from eval.evaluation.runner import RetrievalRun, run_retrieval
from eval.evaluation.thresholds import propose_abstain, propose_weak
from worker.protocols import Embedder
from worker.retrieval.aggregate import write_thresholds
from worker.retrieval.pipeline import RetrievalResult
from worker.retrieval.stage import FEATURES, StageModel, write_model

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


@dataclass(frozen=True, slots=True)
class Collected:
    """Every fit-half candidate's raw features (``FEATURES`` order) and label, grouped by question."""

    x: np.ndarray  # candidates × FEATURES
    y: np.ndarray  # 1: an accepted answer of the question's topic
    question: np.ndarray  # the candidate's question, an index into ``questions``
    gold_topic: np.ndarray  # 1: the candidate's topic is the question's
    topic: np.ndarray  # the candidate's topic id
    questions: tuple[str, ...]
    meta: dict[str, Any]
    post: np.ndarray | None = None  # the candidate's post id (features collected since the excerpt column)

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            x=self.x,
            y=self.y,
            question=self.question,
            gold_topic=self.gold_topic,
            topic=self.topic,
            post=self.post if self.post is not None else np.zeros(0, np.int64),
            questions=np.asarray(self.questions),
            features=np.asarray(FEATURES),
            meta=np.asarray(json.dumps(self.meta)),
        )

    @classmethod
    def load(cls, path: Path) -> Collected:
        with np.load(path) as data:
            if tuple(str(f) for f in data["features"]) != FEATURES:
                raise ValueError(f"{path}: collected for other features; collect again")
            return cls(
                data["x"],
                data["y"],
                data["question"],
                data["gold_topic"],
                data["topic"],
                tuple(str(q) for q in data["questions"]),
                json.loads(str(data["meta"])),
                data["post"] if "post" in data and len(data["post"]) else None,
            )


def collect_features(run: RetrievalRun, model_set: str) -> Collected:
    """The fit half through the second stage under provisional weights (the candidate set does not
    depend on the weights), every candidate's features recorded."""
    xs: list[list[float]] = []
    ys: list[float] = []
    qs: list[int] = []
    gt: list[float] = []
    topics: list[int] = []
    posts: list[int] = []
    ids: list[str] = []

    def collect(q: Question, config: Config, result: RetrievalResult) -> None:
        if not q.answerable:
            return
        gold, gold_topics = set(q.gold_post_ids), set(q.gold_topic_ids)
        ids.append(q.id)
        for cand, row in zip(result.candidates, result.stage_features, strict=False):
            xs.append([row[f] for f in FEATURES])
            ys.append(1.0 if cand.post_id in gold else 0.0)
            qs.append(len(ids) - 1)
            gt.append(1.0 if cand.topic_id in gold_topics else 0.0)
            topics.append(cand.topic_id)
            posts.append(cand.post_id)

    stage_run = replace(
        run,
        configs=(CONFIGS[STAGE_EXCERPT if run.excerpt_model else STAGE],),
        half="fit",
        stage_model=provisional(model_set),
        collect=collect,
        write_thresholds=False,
    )
    results = run_retrieval(stage_run)
    meta = {
        "data": ", ".join(Path(q).name for q in run.questions)
        + f" — the fit half only (long and short forms); forum {results['meta']['forum']} "
        f"({results['meta']['posts_indexed']} posts)",
    }
    return Collected(
        np.asarray(xs, dtype=np.float64).reshape(-1, len(FEATURES)),
        np.asarray(ys, dtype=np.float64),
        np.asarray(qs, dtype=np.int64),
        np.asarray(gt, dtype=np.float64),
        np.asarray(topics, dtype=np.int64),
        tuple(ids),
        meta,
        np.asarray(posts, dtype=np.int64),
    )


def with_excerpt_cosines(
    data: Collected, questions: Mapping[str, str], embedder: Embedder, vectors: Path
) -> Collected:
    """``data`` with its ``excerpt_cosine`` column computed from a file of excerpt vectors (``post_id``,
    ``vec``: the eval's cache of the column, ``eval.evaluation.excerpt_cache``) and ``embedder``'s
    vector of each question (``questions``: id → text). The candidate set does not depend on that
    feature, so this equals collecting again with the column filled from the same vectors, without
    running retrieval a second time. Candidates without a vector get NaN (the mean), as in the stage."""
    if data.post is None:
        raise ValueError("these features were collected without post ids: collect them again")
    with np.load(vectors) as f:
        ids, vecs = f["post_id"], np.asarray(f["vec"], dtype=np.float32)
    row = {int(p): i for i, p in enumerate(ids)}
    qv = np.asarray(embedder.embed([questions[q] for q in data.questions], kind="query"), np.float32)
    col = FEATURES.index("excerpt_cosine")
    x = data.x.copy()
    for i, (qi, pid) in enumerate(zip(data.question, data.post, strict=True)):
        r = row.get(int(pid))
        x[i, col] = float(qv[qi] @ vecs[r]) if r is not None else np.nan
    meta = {**data.meta, "excerpt_cosine": f"{embedder.model} question vectors x {vectors.name}"}
    return replace(data, x=x, meta=meta)


def check_features(features: Sequence[str]) -> None:
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown second-stage features: {sorted(unknown)}; known: {', '.join(FEATURES)}")


def fit(data: Collected, features: Sequence[str], model_set: str, *, l2: float = L2) -> StageModel:
    """The logistic regression over ``features`` (a subset of ``FEATURES``) of ``data``'s candidates."""
    check_features(features)
    cols = [FEATURES.index(f) for f in features]
    x = data.x[:, cols]
    if not len(data.y) or data.y.sum() == 0:
        raise ValueError("no accepted answer among the fit half's candidates: nothing to fit")
    if np.isnan(x).all(axis=0).any():
        missing = [f for f, gone in zip(features, np.isnan(x).all(axis=0), strict=True) if gone]
        raise ValueError(f"no candidate has a value of {missing}: collect with the excerpt column filled")
    mean = np.nanmean(x, axis=0)
    std = np.nanstd(x, axis=0)
    std[std <= 1e-9] = 1.0
    x = np.where(np.isnan(x), mean, x)  # a missing value is the mean: what the stage's score does
    weights, bias = logistic_regression((x - mean) / std, data.y, l2=l2)
    return StageModel(
        model_set, tuple(features), tuple(float(w) for w in weights), tuple(mean), tuple(std), bias
    )


def scores_of(data: Collected, model: StageModel) -> np.ndarray:
    """``model``'s score of every candidate of ``data`` (a missing value counts as the mean)."""
    cols = [FEATURES.index(f) for f in model.features]
    x = np.nan_to_num((data.x[:, cols] - np.asarray(model.mean)) / np.asarray(model.std), nan=0.0)
    return np.asarray(x @ np.asarray(model.weights) + model.bias)


def hits_at(data: Collected, model: StageModel, k: int = 5) -> dict[str, float]:
    """Share of ``data``'s questions with an accepted answer (post) and the gold topic among the first
    ``k`` candidates (posts) / distinct topics when ranked by ``model``."""
    scores = scores_of(data, model)
    post_hits = topic_hits = 0
    n = len(data.questions)
    for qi in range(n):
        rows = np.flatnonzero(data.question == qi)
        order = rows[np.argsort(-scores[rows], kind="stable")]
        post_hits += bool(data.y[order[:k]].any())
        topic_hits += _topic_rank(data, order) < k
    if not n:
        return {"post_hit@5": 0.0, "topic_hit@5": 0.0}
    return {"post_hit@5": round(post_hits / n, 4), "topic_hit@5": round(topic_hits / n, 4)}


def _topic_rank(data: Collected, order: np.ndarray) -> int:
    """The gold topic's place (0-based) among the distinct topics of ``order``; past the end if absent."""
    seen: set[int] = set()
    for i in order:
        if data.gold_topic[i]:
            return len(seen)
        seen.add(int(data.topic[i]))
    return len(order) + 1


def cross_validated(
    data: Collected, features: Sequence[str], model_set: str, *, l2: float = L2, folds: int = 5
) -> dict[str, float]:
    """Post and topic hit@5 of ``features`` by ``folds``-fold cross-validation over the fit half's
    questions (a question's long and short forms in one fold): how features are chosen without
    looking at the test half."""
    base = [q.removesuffix("/short") for q in data.questions]
    fold_of = {b: int(hashlib.sha256(b.encode()).hexdigest(), 16) % folds for b in set(base)}
    totals = {"post_hit@5": 0.0, "topic_hit@5": 0.0}
    for f in range(folds):
        held = np.asarray([fold_of[b] == f for b in base])
        train = _subset(data, ~held)
        test = _subset(data, held)
        model = fit(train, features, model_set, l2=l2)
        for key, value in hits_at(test, model).items():
            totals[key] += value * len(test.questions)
    n = len(data.questions)
    return {key: round(value / n, 4) for key, value in totals.items()}


def _subset(data: Collected, keep_questions: np.ndarray) -> Collected:
    kept = np.flatnonzero(keep_questions)
    remap = -np.ones(len(data.questions), dtype=np.int64)
    remap[kept] = np.arange(len(kept))
    rows = keep_questions[data.question]
    return Collected(
        data.x[rows],
        data.y[rows],
        remap[data.question[rows]],
        data.gold_topic[rows],
        data.topic[rows],
        tuple(data.questions[i] for i in kept),
        data.meta,
        data.post[rows] if data.post is not None else None,
    )


def top_scores(data: Collected, model: StageModel) -> list[tuple[float, bool, bool]]:
    """Per question: the top candidate's score under ``model``, whether it is in the gold topic, and
    whether the question is a short form."""
    scores = scores_of(data, model)
    out = []
    for qi, qid in enumerate(data.questions):
        rows = np.flatnonzero(data.question == qi)
        if len(rows):
            top = rows[int(np.argmax(scores[rows]))]
            out.append((float(scores[top]), bool(data.gold_topic[top]), qid.endswith("/short")))
    return out


def stage_thresholds(data: Collected, model: StageModel) -> tuple[float, float, dict[str, Any]]:
    """Zone thresholds for ``model`` from the fit half's answerable questions (as ``eval retrieval
    --write-thresholds`` proposes them: abstain on at most 5 % of long and of short questions; weak
    below the lowest score whose normal zone is 80 % right), so that refitted weights never keep the
    thresholds of the previous ones. Out-of-domain questions are not collected here: their abstention
    is judged on the test half by ``python -m eval retrieval``."""
    tops = top_scores(data, model)
    by_slice = {name: [v for v, _, short in tops if short == (name == "short")] for name in ("long", "short")}
    abstain = min(propose_abstain(v) for v in by_slice.values() if v)
    weak = propose_weak([(v, right) for v, right, _ in tops], [], abstain)
    weak_below = weak if weak is not None else abstain
    figures = {
        name: {"n": len(v), "abstained": round(sum(x < abstain for x in v) / len(v), 4)}
        for name, v in by_slice.items()
        if v
    }
    return abstain, weak_below, figures


def fit_stage(
    run: RetrievalRun,
    model_set: str,
    *,
    l2: float = L2,
    write: bool = True,
    features: Sequence[str] = FEATURES,
    collected: Path | None = None,
) -> dict[str, Any]:
    """Collect the fit half's candidate features (or read them from ``collected``), fit, and (``write``)
    record the weights; the features are saved to ``run.out/features.npz`` for refits."""
    check_features(features)  # before a retrieval run, not after it
    if collected is not None:
        data = Collected.load(collected)
    else:
        data = collect_features(run, model_set)
        run.out.mkdir(parents=True, exist_ok=True)
        data.save(run.out / "features.npz")
    model = fit(data, features, model_set, l2=l2)
    figures = {
        "fitted": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "method": f"logistic regression (L2 {l2}) on standardised features; label: the post is an "
        "accepted answer of the question's topic",
        "data": data.meta["data"],
        "questions": len(data.questions),
        "questions_with_answer_in_candidates": len({int(q) for q in data.question[data.y > 0]}),
        "candidates": len(data.y),
        "positives": int(data.y.sum()),
        "fit_half_in_sample": hits_at(data, model),
        "fit_half_cross_validated": cross_validated(data, features, model_set, l2=l2),
    }
    abstain, weak, slices = stage_thresholds(data, model)
    figures["thresholds"] = {"abstain_below": round(abstain, 3), "weak_below": round(weak, 3)}
    if write:
        write_model(model, figures)
        write_thresholds(
            model.scorer_id,
            abstain,
            weak,
            {
                "fitted": figures["fitted"],
                "data": f"{figures['data']}; answerable questions only (python -m eval fit-stage)",
                "fit_half_in_sample": {"slices": slices},
            },
        )
        log.info("second-stage weights and zone thresholds for %s written", model_set)
    return {"model": model.as_dict(), **figures}
