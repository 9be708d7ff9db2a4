"""Fitting the second stage: its weights, topic and abstention scores and zone thresholds.

The one implementation behind ``citebot calibrate`` (``worker.calibration.run``) and ``python -m eval
fit-stage`` (``eval/evaluation/fit_stage.py``). Input: every candidate the second stage saw for each
question under provisional weights (cosine alone: the candidate set, the first ``stage_k`` fused posts,
does not depend on the weights), its features and whether it is an accepted answer of the question's
topic (``Collected``). A logistic regression (L2, Newton's method, standardised features) gives the
post score; optional topic and question-level (abstention) scores are fitted the same way; the zone
thresholds are proposed from the fitted scores of the answerable questions (``propose_abstain``,
``propose_weak``). Question ids follow one convention: a short form is ``<id>/short``, so that both
forms of a question fall in one cross-validation fold.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from worker.retrieval.stage import (
    FEATURES,
    QUESTION_FEATURES,
    TOPIC_FEATURES,
    WITHOUT_CE,
    Linear,
    StageModel,
    ordering,
    question_row,
    topic_rows,
)

if TYPE_CHECKING:
    from worker.retrieval.retriever import RetrievalResult

MAX_ABSTAINED = 0.05  # answerable questions a proposed abstain threshold may abstain on (each slice)
NORMAL_PRECISION = 0.8  # the top-1 precision the normal zone must reach


def propose_abstain(answerable: Sequence[float], max_abstained: float = MAX_ABSTAINED) -> float:
    """The highest threshold t with #(answerable < t) ≤ max_abstained · n."""
    ordered = sorted(answerable)
    if not ordered:
        return -math.inf
    allowed = math.floor(max_abstained * len(ordered))
    return ordered[min(allowed, len(ordered) - 1)]


def propose_weak(
    ans: Sequence[tuple[float, bool]], ood: Sequence[float], floor: float, target: float = NORMAL_PRECISION
) -> float | None:
    """The lowest threshold ≥ ``floor`` whose 'normal' zone has top-1 precision ≥ ``target``, if any."""
    scored = [(v, right) for v, right in ans] + [(v, False) for v in ood]
    for t in sorted({v for v, _ in scored if v >= floor}):
        above = [right for v, right in scored if v >= t]
        if len(above) >= 10 and sum(above) / len(above) >= target:
            return t
    return None


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


# One candidate of a question: its post and topic ids, whether it is an accepted answer (1.0) and in
# the question's topic (1.0), and its features in ``FEATURES`` order (NaN: no value).
CandidateRow = tuple[int, int, float, float, list[float]]


def candidate_rows(
    gold_posts: Sequence[int], gold_topics: Sequence[int], result: RetrievalResult
) -> list[CandidateRow]:
    """The candidates the second stage saw for one question (``result``), labelled by its gold."""
    gold, topics = set(gold_posts), set(gold_topics)
    return [
        (
            cand.post_id,
            cand.topic_id,
            1.0 if cand.post_id in gold else 0.0,
            1.0 if cand.topic_id in topics else 0.0,
            [float(row[f]) for f in FEATURES],
        )
        for cand, row in zip(result.candidates, result.stage_features, strict=False)
    ]


@dataclass(slots=True)
class FeatureRows:
    """The rows of a ``Collected`` as questions go through the second stage: ``add`` each question's
    retrieval (its candidates and their ``stage_features``), then ``collected``. The one collector of
    ``citebot calibrate`` and ``python -m eval fit-stage``."""

    xs: list[list[float]] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    qs: list[int] = field(default_factory=list)
    gt: list[float] = field(default_factory=list)
    topics: list[int] = field(default_factory=list)
    posts: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    answerable: list[bool] = field(default_factory=list)

    def add(
        self,
        question_id: str,
        answerable: bool,
        gold_posts: Sequence[int],
        gold_topics: Sequence[int],
        result: RetrievalResult,
    ) -> None:
        """One question's candidates: label 1 for an accepted answer, ``gold_topic`` 1 for its topic."""
        self.extend(question_id, answerable, candidate_rows(gold_posts, gold_topics, result))

    def extend(self, question_id: str, answerable: bool, rows: Sequence[CandidateRow]) -> None:
        """One question's candidates as ``candidate_rows`` made them (or as saved, ``work.py``)."""
        self.ids.append(question_id)
        self.answerable.append(answerable)
        for post, topic, label, gold_topic, x in rows:
            self.xs.append(list(x))
            self.ys.append(label)
            self.qs.append(len(self.ids) - 1)
            self.gt.append(gold_topic)
            self.topics.append(topic)
            self.posts.append(post)

    def collected(self, meta: dict[str, Any] | None = None) -> Collected:
        return Collected(
            np.asarray(self.xs, dtype=np.float64).reshape(-1, len(FEATURES)),
            np.asarray(self.ys, dtype=np.float64),
            np.asarray(self.qs, dtype=np.int64),
            np.asarray(self.gt, dtype=np.float64),
            np.asarray(self.topics, dtype=np.int64),
            tuple(self.ids),
            meta or {},
            np.asarray(self.posts, dtype=np.int64),
            np.asarray(self.answerable, dtype=bool),
        )


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
    # per question: answerable (1) or out of domain (0); None: all answerable (features collected before
    # the out-of-domain questions were)
    answerable: np.ndarray | None = None

    def answerable_mask(self) -> np.ndarray:
        if self.answerable is None:
            return np.ones(len(self.questions), dtype=bool)
        return np.asarray(self.answerable, dtype=bool)

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            x=self.x,
            y=self.y,
            question=self.question,
            gold_topic=self.gold_topic,
            topic=self.topic,
            post=self.post if self.post is not None else np.zeros(0, np.int64),
            answerable=self.answerable_mask(),
            questions=np.asarray(self.questions),
            features=np.asarray(FEATURES),
            meta=np.asarray(json.dumps(self.meta)),
        )

    @classmethod
    def load(cls, path: Path) -> Collected:
        with np.load(path) as data:
            features = tuple(str(f) for f in data["features"])
            if features != FEATURES[: len(features)]:
                raise ValueError(f"{path}: collected for other features; collect again")
            x = data["x"]
            if len(features) < len(FEATURES):  # collected before the later features: they have no value
                x = np.hstack([x, np.full((len(x), len(FEATURES) - len(features)), np.nan)])
            return cls(
                x,
                data["y"],
                data["question"],
                data["gold_topic"],
                data["topic"],
                tuple(str(q) for q in data["questions"]),
                json.loads(str(data["meta"])),
                data["post"] if "post" in data and len(data["post"]) else None,
                data.get("answerable", None),
            )


def check_features(features: Sequence[str]) -> None:
    unknown = set(features) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown second-stage features: {sorted(unknown)}; known: {', '.join(FEATURES)}")


def fit(data: Collected, features: Sequence[str], model_set: str, *, l2: float = L2) -> StageModel:
    """The logistic regression over ``features`` (a subset of ``FEATURES``) of the candidates of
    ``data``'s answerable questions."""
    check_features(features)
    data = answerable_only(data)
    if not len(data.y) or data.y.sum() == 0:
        raise ValueError("no accepted answer among the fit half's candidates: nothing to fit")
    x = data.x[:, [FEATURES.index(f) for f in features]]
    line = _standardised_fit(x, data.y, features, l2)
    return StageModel(model_set, line.features, line.weights, line.mean, line.std, line.bias)


def scores_of(data: Collected, model: StageModel) -> np.ndarray:
    """``model``'s score of every candidate of ``data`` (a missing value counts as the mean)."""
    cols = [FEATURES.index(f) for f in model.features]
    x = np.nan_to_num((data.x[:, cols] - np.asarray(model.mean)) / np.asarray(model.std), nan=0.0)
    return np.asarray(x @ np.asarray(model.weights) + model.bias)


def _rows(data: Collected, idx: np.ndarray) -> list[dict[str, float]]:
    return [dict(zip(FEATURES, r, strict=True)) for r in data.x[idx].tolist()]


def ranked(data: Collected, model: StageModel, scores: np.ndarray | None = None) -> list[np.ndarray]:
    """Per question, its candidates' rows in ``model``'s order (``worker.retrieval.stage.ordering``)."""
    scores = scores_of(data, model) if scores is None else scores
    out = []
    for qi in range(len(data.questions)):
        idx = np.flatnonzero(data.question == qi)
        if model.topic is None:
            out.append(idx[np.argsort(-scores[idx], kind="stable")])
        else:
            order = ordering(model, data.topic[idx].tolist(), scores[idx].tolist(), _rows(data, idx))
            out.append(idx[np.asarray(order, dtype=np.int64)])
    return out


def question_hits(data: Collected, model: StageModel, k: int = 5) -> np.ndarray:
    """Per question of ``data`` (rows: questions; columns: post hit, topic hit, cited accepted): whether
    an accepted answer (post) / the gold topic is among the first ``k`` candidates / distinct topics
    when ranked by ``model``, and whether an accepted answer is among the first ``k`` cited sources
    (the candidates deduplicated by topic)."""
    out = np.zeros((len(data.questions), 3), dtype=bool)
    for qi, order in enumerate(ranked(data, model)):
        first_of: dict[int, int] = {}  # the sources: each topic's first candidate, in order
        for i in order:
            first_of.setdefault(int(data.topic[i]), int(i))
        out[qi] = (
            bool(data.y[order[:k]].any()),
            _topic_rank(data, order) < k,
            any(data.y[i] for i in list(first_of.values())[:k]),
        )
    return out


def hits_at(data: Collected, model: StageModel, k: int = 5) -> dict[str, float]:
    """Share of ``data``'s questions with an accepted answer (post) and the gold topic among the first
    ``k`` candidates (posts) / distinct topics when ranked by ``model``, and with an accepted answer
    among the first ``k`` cited sources (``question_hits``)."""
    if not len(data.questions):
        return {"post_hit@5": 0.0, "topic_hit@5": 0.0, "cited_accepted@5": 0.0}
    share = question_hits(data, model, k).mean(axis=0)
    return {
        "post_hit@5": round(float(share[0]), 4),
        "topic_hit@5": round(float(share[1]), 4),
        "cited_accepted@5": round(float(share[2]), 4),
    }


def _topic_rank(data: Collected, order: np.ndarray) -> int:
    """The gold topic's place (0-based) among the distinct topics of ``order``; past the end if absent."""
    seen: set[int] = set()
    for i in order:
        if data.gold_topic[i]:
            return len(seen)
        seen.add(int(data.topic[i]))
    return len(order) + 1


def _standardised_fit(x: np.ndarray, y: np.ndarray, features: Sequence[str], l2: float) -> Linear:
    """A logistic regression of ``y`` on the columns ``features`` of ``x``, standardised; a missing
    value is the column's mean (what the scores do at query time)."""
    if np.isnan(x).all(axis=0).any():
        missing = [f for f, gone in zip(features, np.isnan(x).all(axis=0), strict=True) if gone]
        raise ValueError(f"no candidate has a value of {missing}: collect with the excerpt column filled")
    mean = np.nanmean(x, axis=0)
    std = np.nanstd(x, axis=0)
    std[std <= 1e-9] = 1.0
    x = np.where(np.isnan(x), mean, x)
    weights, bias = logistic_regression((x - mean) / std, y, l2=l2)
    return Linear(
        tuple(features),
        tuple(float(w) for w in weights),
        tuple(mean),
        tuple(std),
        bias,
        FEATURES + TOPIC_FEATURES + QUESTION_FEATURES,
    )


def _matrix(rows: Sequence[Mapping[str, float]], features: Sequence[str]) -> np.ndarray:
    return np.asarray([[r[f] for f in features] for r in rows], dtype=np.float64).reshape(-1, len(features))


def fit_topic(
    data: Collected, model: StageModel, features: Sequence[str] = TOPIC_FEATURES, *, l2: float = L2
) -> Linear:
    """The topic score over ``features`` (``TOPIC_FEATURES``): a logistic regression of "this topic is
    the question's" on the answerable questions' pooled topics, under ``model``'s post scores."""
    scores = scores_of(data, model)
    rows: list[dict[str, float]] = []
    labels: list[float] = []
    for qi in np.flatnonzero(data.answerable_mask()):
        idx = np.flatnonzero(data.question == qi)
        if not len(idx):
            continue
        gold = {int(t) for t in data.topic[idx][data.gold_topic[idx] > 0]}
        for t, row in topic_rows(data.topic[idx].tolist(), scores[idx].tolist(), _rows(data, idx)).items():
            rows.append(row)
            labels.append(1.0 if t in gold else 0.0)
    line = _standardised_fit(_matrix(rows, features), np.asarray(labels), features, l2)
    return replace(line, known=TOPIC_FEATURES)


def question_rows(data: Collected, model: StageModel) -> tuple[list[dict[str, float]], list[int]]:
    """``QUESTION_FEATURES`` of each question that has candidates, and its index in ``data``."""
    scores = scores_of(data, model)
    rows, kept = [], []
    for qi in range(len(data.questions)):
        idx = np.flatnonzero(data.question == qi)
        if len(idx):
            rows.append(question_row(scores[idx].tolist(), _rows(data, idx)))
            kept.append(qi)
    return rows, kept


def fit_abstention(
    data: Collected, model: StageModel, features: Sequence[str] = QUESTION_FEATURES, *, l2: float = L2
) -> Linear:
    """The question-level score: a logistic regression of "answerable" (the fit half's answerable
    questions, long and short) against out-of-domain questions, under ``model``'s post scores."""
    if data.answerable_mask().all():
        raise ValueError("no out-of-domain question among the collected ones: collect with them")
    rows, kept = question_rows(data, model)
    y = data.answerable_mask()[kept].astype(np.float64)
    line = _standardised_fit(_matrix(rows, features), y, features, l2)
    return replace(line, known=QUESTION_FEATURES)


def _folds(questions: Sequence[str], folds: int) -> np.ndarray:
    """A question's fold by a hash of its id without ``/short`` (both forms in one fold)."""
    base = [q.removesuffix("/short") for q in questions]
    return np.asarray([int(hashlib.sha256(b.encode()).hexdigest(), 16) % folds for b in base])


def with_parts(
    train: Collected,
    model: StageModel,
    *,
    topic_features: Sequence[str] | None,
    within: float,
    question_features: Sequence[str] | None,
    l2: float,
) -> StageModel:
    """``model`` with a topic score and an abstention score fitted on ``train`` (either left out when
    its features are None; the abstention score also when ``train`` has no out-of-domain question)."""
    if topic_features:
        model = replace(model, topic=fit_topic(train, model, topic_features, l2=l2), within=within)
    if question_features and not train.answerable_mask().all():
        model = replace(model, abstention=fit_abstention(train, model, question_features, l2=l2))
    return model


def cross_validated(
    data: Collected,
    features: Sequence[str],
    model_set: str,
    *,
    l2: float = L2,
    folds: int = 5,
    topic_features: Sequence[str] | None = None,
    within: float = 1.0,
    question_features: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Post and topic hit@5 (and cited accepted) of ``features`` — with a topic score over
    ``topic_features`` — by ``folds``-fold cross-validation over the fit half's answerable questions
    (a question's long and short forms in one fold), and, with ``question_features`` and out-of-domain
    questions in ``data``, each question's out-of-fold answerable score (``oof``): how features are
    chosen, and the abstention threshold set, without looking at the test half."""
    fold = _folds(data.questions, folds)
    answerable = data.answerable_mask()
    totals = {"post_hit@5": 0.0, "topic_hit@5": 0.0, "cited_accepted@5": 0.0}
    oof = np.full(len(data.questions), np.nan)
    for f in range(folds):
        train = subset(data, fold != f)
        post_model = fit(answerable_only(train), features, model_set, l2=l2)
        model = with_parts(
            train,
            post_model,
            topic_features=topic_features,
            within=within,
            question_features=question_features,
            l2=l2,
        )
        test = subset(data, (fold == f) & answerable)
        for key, value in hits_at(test, model).items():
            totals[key] += value * len(test.questions)
        if model.abstention is not None:
            held = np.flatnonzero(fold == f)
            rows, kept = question_rows(subset(data, fold == f), model)
            for qi, row in zip(kept, rows, strict=True):
                oof[held[qi]] = model.abstention.score(row)
    n = int(answerable.sum())
    out: dict[str, Any] = {key: round(value / n, 4) if n else 0.0 for key, value in totals.items()}
    if not np.isnan(oof).all():
        out["oof"] = oof
    return out


def subset(data: Collected, keep_questions: np.ndarray) -> Collected:
    """The questions of ``data`` where ``keep_questions`` (a mask over ``data.questions``) holds."""
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
        data.answerable_mask()[kept],
    )


def answerable_only(data: Collected) -> Collected:
    """The answerable questions of ``data`` (what the post and topic scores are fitted and judged on)."""
    return subset(data, data.answerable_mask())


def top_scores(data: Collected, model: StageModel) -> list[tuple[float, bool, bool]]:
    """Per answerable question: the best post score under ``model`` (what the zone reads), whether the
    first candidate in ``model``'s order is in the gold topic, and whether the question is a short form."""
    data = answerable_only(data)
    scores = scores_of(data, model)
    out = []
    for qid, order in zip(data.questions, ranked(data, model, scores), strict=True):
        if len(order):
            out.append((float(scores[order].max()), bool(data.gold_topic[order[0]]), qid.endswith("/short")))
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


def abstention_threshold(
    data: Collected, oof: np.ndarray, max_abstained: float = MAX_ABSTAINED
) -> tuple[float, dict[str, Any]]:
    """The highest threshold on the out-of-fold answerable scores ``oof`` that abstains on at most
    ``max_abstained`` of each answerable slice (long, short) of ``data``, and what it abstains on
    there per slice. A share below the target (5 %) leaves a margin for the sampling error of the
    half it is judged on: at 174 questions a share's standard error near 4 % is 1.5 points."""
    answerable = data.answerable_mask()
    short = np.asarray([q.endswith("/short") for q in data.questions])
    ok = ~np.isnan(oof)
    by_slice = {
        "long": oof[ok & answerable & ~short],
        "short": oof[ok & answerable & short],
        "ood": oof[ok & ~answerable],
    }
    threshold = min(
        propose_abstain(v.tolist(), max_abstained) for k, v in by_slice.items() if k != "ood" and len(v)
    )
    figures = {
        k: {"n": len(v), "abstained": round(float((v < threshold).mean()), 4)}
        for k, v in by_slice.items()
        if len(v)
    }
    return threshold, figures


def check_parts(
    features: Sequence[str], topic_features: Sequence[str] | None, question_features: Sequence[str] | None
) -> None:
    """ValueError naming any unknown post, topic or question feature (before anything runs)."""
    check_features(features)
    for names, known in ((topic_features, TOPIC_FEATURES), (question_features, QUESTION_FEATURES)):
        if set(names or ()) - set(known):
            raise ValueError(
                f"unknown features: {sorted(set(names or ()) - set(known))}; known: {', '.join(known)}"
            )


@dataclass(frozen=True, slots=True)
class Fitted:
    """A fitted model set: the model, its zone thresholds and how it was fitted (``figures``)."""

    model: StageModel
    abstain_below: float
    weak_below: float
    figures: dict[str, Any] = field(default_factory=dict)
    slices: dict[str, Any] = field(default_factory=dict)  # the fit half's abstention per slice


def fit_model(
    data: Collected,
    model_set: str,
    *,
    l2: float = L2,
    features: Sequence[str] = WITHOUT_CE,
    topic_features: Sequence[str] | None = TOPIC_FEATURES,
    within: float = 1.0,
    question_features: Sequence[str] | None = QUESTION_FEATURES,
    max_abstained: float = MAX_ABSTAINED,
) -> Fitted:
    """Fit on ``data`` (the fit half only) the post score, the topic score (``topic_features``; None:
    none) and, when ``data`` holds out-of-domain questions, the abstention score
    (``question_features``), its threshold set on the out-of-fold scores (5 folds): at most
    ``max_abstained`` of the long and of the short answerable questions; then the zone thresholds."""
    check_parts(features, topic_features, question_features)
    if "excerpt_cosine" not in features:  # a model set without the second model has no excerpt cosines
        topic_features = tuple(f for f in topic_features or () if f != "best_excerpt")
        question_features = tuple(f for f in question_features or () if f != "top_excerpt")
    answerable = answerable_only(data)
    post_model = fit(data, features, model_set, l2=l2)
    model = with_parts(
        data,
        post_model,
        topic_features=topic_features,
        within=within,
        question_features=question_features,
        l2=l2,
    )
    cv = cross_validated(
        data,
        features,
        model_set,
        l2=l2,
        topic_features=topic_features,
        within=within,
        question_features=question_features,
    )
    oof = cv.pop("oof", None)
    figures: dict[str, Any] = {
        "fitted": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "method": f"logistic regression (L2 {l2}) on standardised features; label: the post is an "
        "accepted answer of the question's topic"
        + ("; topic score: the topic is the question's" if model.topic else "")
        + (
            "; abstention score: the question is answerable (against out-of-domain ones)"
            if model.abstention
            else ""
        ),
        "data": data.meta.get("data", ""),
        "questions": len(answerable.questions),
        "out_of_domain_questions": len(data.questions) - len(answerable.questions),
        "questions_with_answer_in_candidates": len({int(q) for q in answerable.question[answerable.y > 0]}),
        "candidates": len(answerable.y),
        "positives": int(answerable.y.sum()),
        "fit_half_in_sample": hits_at(answerable, model),
        "fit_half_cross_validated": cv,
        "post_score_alone_cross_validated": cross_validated(data, features, model_set, l2=l2)
        if model.topic
        else cv,
    }
    if model.abstention is not None and oof is not None:
        threshold, by_slice = abstention_threshold(data, oof, max_abstained)
        model = replace(model, abstain_below=threshold)
        figures["abstention_fit"] = {
            "abstain_below": round(threshold, 3),
            "max_abstained": max_abstained,
            "fit_half_out_of_fold": by_slice,
        }
    abstain, weak, slices = stage_thresholds(data, model)
    figures["thresholds"] = {"abstain_below": round(abstain, 3), "weak_below": round(weak, 3)}
    return Fitted(model, abstain, weak, figures, slices)


def abstained(data: Collected, model: StageModel, abstain_below: float) -> np.ndarray:
    """Per question of ``data``: whether the worker's zone would be ``abstain`` under ``model`` and the
    zone threshold ``abstain_below`` (``Retriever._stage_zone``): with an abstention score, that score
    below ``model.abstain_below``; without one, the top post score below ``abstain_below``. A question
    without candidates abstains (there is nothing to cite)."""
    scores = scores_of(data, model)
    out = np.ones(len(data.questions), dtype=bool)
    for qi in range(len(data.questions)):
        idx = np.flatnonzero(data.question == qi)
        if not len(idx):
            continue
        s = scores[idx].tolist()
        answerable = model.answerable(s, _rows(data, idx))
        out[qi] = answerable < model.abstain_below if answerable is not None else max(s) < abstain_below
    return out
