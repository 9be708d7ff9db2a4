"""The second stage: one score from the evidence each fused candidate collected.

Over the first ``stage_k`` fused candidates (cosine channel + lexical channel, weighted RRF), each post
gets standardised features and a linear score::

    stage = bias + Σ w_f · (x_f − mean_f) / std_f

Features (``FEATURES``):

- ``cosine``: the question's cosine to the post (the recall model's);
- ``lexical``: the lexical channel's score of the post (0 when it matches no term), divided by the best
  lexical score among the question's candidates, so that long and short questions weigh alike;
- ``lexical_top``: that best lexical score itself (the same for every candidate of a question: it
  tells a question the forum has words for from one it has none for, which the zones need);
- ``first_post``: 1 for a topic's first post (the question someone asked), 0 for a reply;
- ``first_reply``, ``to_question``, ``by_asker``, ``asker_followed``: the post's place in its topic
  (``worker/retrieval/threads.py``): what tells a topic's answer from its other replies;
- ``topic_best``: the best cosine among the topic's posts (a reply that answers a well-matched question
  need not resemble the question itself);
- ``brief_cosine``, ``brief_lexical``: ``cosine`` and ``lexical`` again for a brief question (at most
  ``BRIEF_CHARS`` characters of prose once cleaned), 0 otherwise: how much each channel is worth
  depends on how much the question says;
- ``excerpt_cosine``: the second bi-encoder's cosine between the question and the post's excerpt (the
  title and post start the cross-encoder reads), read from its column (``worker/retrieval/excerpts.py``).
  A post without a vector has no value (NaN): the score then gives it the feature's mean, i.e. no
  contribution, and the fit imputes it the same way.
- ``ce_logit``: the cross-encoder's raw logit (TEI ``POST /rerank`` with ``raw_scores``) of the question
  and the post as the reranker reads it (``worker/retrieval/rerank.py`` ``rerank_text``). Only a model
  set fitted with that cross-encoder uses it (``citebot calibrate`` with TEI configured: its id ends
  in ``+ce:<reranker id>``, ``model_set_id``); NaN when the cross-encoder was not asked or failed.

Over the first ``stage_k`` candidates' topics the retriever reads whole topics (``stage_topics`` of
them, in fused order), so that a topic's answer competes even when the channels found only its
question; every candidate gets its facts from there.

The weights, means and standard deviations are data per model set (``stage_weights.json`` beside
this module, keyed by ``model_set_id``: the recall model, the lexical recipe and, when the excerpt
column is used, the second model; without it, or when it fails, the set without that model is used),
fitted by ``python -m eval fit-stage`` by logistic regression on the forum's solved topics (the
fitting half of the development set; never the questions that are scored with them). The score is
then the log-odds that the post is an accepted answer, and the top candidate's score sets the zone
with the thresholds calibrated for the model set (``zone_thresholds.json``, key
``stage:<model_set_id>``).

Two optional parts of a model set, fitted by the same command on the same half:

- **Topics** (``topic``): each topic's replies among the candidates pooled into topic features
  (``TOPIC_FEATURES``: the best post score, their log-sum-exp, how many, the best excerpt cosine,
  lexical score and cosine; ``topic_rows``) and a linear topic score (the log-odds that the topic is
  the question's). Candidates are then ordered by ``log σ(topic score) + within · log softmax(post
  score within its topic)``: the topic's chance times the post's share of it, so that the best topics
  come first and, within a topic, its likeliest answer (the post score prefers an accepted-looking
  reply).
- **Abstention** (``abstention``): a question-level score (``QUESTION_FEATURES``: the top post score,
  its gap to the fifth, the best lexical score, the best cosine and excerpt cosine, whether the
  question is brief), the log-odds that the question is answerable from the forum; below
  ``abstain_below`` the zone is ``abstain`` whatever the top post score says (the weak / normal
  boundary stays on the top post score).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from worker.domain import Candidate
from worker.errors import ConfigError
from worker.retrieval.lexical import clean_question
from worker.retrieval.threads import EMPTY, PostFacts, Thread

WEIGHTS_FILE = Path(__file__).with_name("stage_weights.json")
FEATURES = (
    "cosine",
    "lexical",
    "lexical_top",
    "first_post",
    "first_reply",
    "to_question",
    "by_asker",
    "asker_followed",
    "topic_best",
    "brief_cosine",
    "brief_lexical",
    "excerpt_cosine",
    "ce_logit",
)
# The features a model set without a cross-encoder is fitted on (``python -m eval fit-stage``'s default)
WITHOUT_CE = tuple(f for f in FEATURES if f != "ce_logit")
TOPIC_FEATURES = ("best", "pooled", "count", "best_excerpt", "best_lexical", "best_cosine")
QUESTION_FEATURES = ("top", "gap", "lexical_top", "top_cosine", "top_excerpt", "brief")
BRIEF_CHARS = 160  # what a member writes to a bot in one sentence (the eval's short questions)
_NO_FACTS = PostFacts()


CE_PREFIX = "+ce:"  # a model set fitted with a cross-encoder's logit: ``…+ce:<reranker id>``


def model_set_id(
    embedding_model: str, excerpt_model: str | None = None, cross_encoder: str | None = None
) -> str:
    """The key of a model set's weights: the recall model, the lexical channel's recipe and, when its
    cosines are a feature, the second bi-encoder; when its logit is a feature, the cross-encoder."""
    base = f"{embedding_model}+lexical-en"
    base = f"{base}+{excerpt_model}" if excerpt_model else base
    return f"{base}{CE_PREFIX}{cross_encoder}" if cross_encoder else base


def _linear(
    features: Sequence[str],
    weights: Sequence[float],
    mean: Sequence[float],
    std: Sequence[float],
    bias: float,
    row: Mapping[str, float],
) -> float:
    """``bias + Σ w · (x − mean) / std``; a missing (NaN) value counts as the feature's mean."""
    return bias + sum(
        w * (row[f] - m) / s
        for f, w, m, s in zip(features, weights, mean, std, strict=True)
        if not math.isnan(row[f])
    )


def _check(features: Sequence[str], known: Sequence[str], *arrays: Sequence[float]) -> None:
    if any(len(a) != len(features) for a in arrays):
        raise ValueError("one weight, mean and std per feature")
    unknown = set(features) - set(known)
    if unknown:
        raise ValueError(f"unknown features: {sorted(unknown)}")
    if any(s <= 0 or not math.isfinite(s) for s in arrays[-1]):
        raise ValueError("standard deviations must be positive")


@dataclass(frozen=True, slots=True)
class Linear:
    """A linear score over standardised features of a topic or a question (see the module)."""

    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    bias: float = 0.0
    known: tuple[str, ...] = TOPIC_FEATURES + QUESTION_FEATURES

    def __post_init__(self) -> None:
        _check(self.features, self.known, self.weights, self.mean, self.std)

    def score(self, row: Mapping[str, float]) -> float:
        return _linear(self.features, self.weights, self.mean, self.std, self.bias, row)

    def as_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "weights": [round(w, 6) for w in self.weights],
            "mean": [round(m, 6) for m in self.mean],
            "std": [round(s, 6) for s in self.std],
            "bias": round(self.bias, 6),
        }

    @classmethod
    def from_dict(
        cls, row: Mapping[str, Any], known: tuple[str, ...] = TOPIC_FEATURES + QUESTION_FEATURES
    ) -> Linear:
        return cls(
            tuple(row["features"]),
            tuple(float(x) for x in row["weights"]),
            tuple(float(x) for x in row["mean"]),
            tuple(float(x) for x in row["std"]),
            float(row.get("bias", 0.0)),
            known,
        )


@dataclass(frozen=True, slots=True)
class StageModel:
    model_set: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    bias: float = 0.0
    topic: Linear | None = None  # the topic score that orders topics (module docstring)
    within: float = 1.0  # the weight of a post's share of its topic in the order
    abstention: Linear | None = None  # the question-level answerable score
    abstain_below: float = -math.inf  # its threshold

    def __post_init__(self) -> None:
        try:
            _check(self.features, FEATURES, self.weights, self.mean, self.std)
        except ValueError as exc:
            raise ValueError(f"second stage: {exc}") from None

    @property
    def scorer_id(self) -> str:
        """The key of this model set's zone thresholds."""
        return f"stage:{self.model_set}"

    def score(self, row: Mapping[str, float]) -> float:
        """The log-odds of ``row``; a missing (NaN) value counts as the feature's mean."""
        return _linear(self.features, self.weights, self.mean, self.std, self.bias, row)

    def answerable(self, scores: Sequence[float], rows: Sequence[Mapping[str, float]]) -> float | None:
        """The question-level log-odds that the question is answerable (None without that model)."""
        if self.abstention is None or not scores:
            return None
        return self.abstention.score(question_row(scores, rows))

    @property
    def uses_excerpt(self) -> bool:
        return "excerpt_cosine" in self.features

    @property
    def uses_cross_encoder(self) -> bool:
        """Whether the post score weighs the cross-encoder's logit (it is then asked in the stage)."""
        return any(f == "ce_logit" and w != 0 for f, w in zip(self.features, self.weights, strict=True))

    def as_dict(self) -> dict[str, Any]:
        out = Linear(self.features, self.weights, self.mean, self.std, self.bias, FEATURES).as_dict()
        if self.topic is not None:
            out["topic"] = {**self.topic.as_dict(), "within": round(self.within, 6)}
        if self.abstention is not None:
            out["abstention"] = {**self.abstention.as_dict(), "abstain_below": round(self.abstain_below, 6)}
        return out


def read_weights(path: Path = WEIGHTS_FILE) -> dict[str, Any]:
    if not path.is_file():
        return {"model_sets": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("model_sets"), dict):
        raise ValueError(f"{path}: expected an object with a 'model_sets' object")
    return data


def model_from_dict(name: str, row: Mapping[str, Any]) -> StageModel:
    """A model set's weights as ``StageModel.as_dict`` wrote them (``stage_weights.json``, or a row
    of ``citebot calibrate``'s)."""
    topic, abstention = row.get("topic"), row.get("abstention")
    post = Linear.from_dict(row, FEATURES)
    return StageModel(
        model_set=name,
        features=post.features,
        weights=post.weights,
        mean=post.mean,
        std=post.std,
        bias=post.bias,
        topic=Linear.from_dict(topic) if topic else None,
        within=float(topic.get("within", 1.0)) if topic else 1.0,
        abstention=Linear.from_dict(abstention) if abstention else None,
        abstain_below=float(abstention["abstain_below"]) if abstention else -math.inf,
    )


@lru_cache(maxsize=8)
def _models(path: Path) -> Mapping[str, StageModel]:
    return {name: model_from_dict(name, row) for name, row in read_weights(path)["model_sets"].items()}


def load_model(model_set: str, path: Path = WEIGHTS_FILE) -> StageModel:
    """The fitted weights of ``model_set``; ConfigError (naming the fitting command) when absent."""
    model = _models(path).get(model_set)
    if model is None:
        raise ConfigError(
            f"no second-stage weights for model set {model_set!r} in {path.name}: fit them to the forum "
            "with `citebot calibrate` (or `python -m eval fit-stage`; without them the shipped path ranks "
            "without the stage)"
        )
    return model


def write_model(model: StageModel, figures: Mapping[str, Any], path: Path = WEIGHTS_FILE) -> None:
    """Record ``model``'s weights with how they were fitted (other model sets are kept)."""
    weights = model.as_dict()
    clash = set(weights) & set(figures)
    if clash:
        raise ValueError(f"the fit's figures would overwrite the weights' {sorted(clash)}")
    data = read_weights(path)
    data["model_sets"][model.model_set] = {**weights, **figures}
    data["model_sets"] = dict(sorted(data["model_sets"].items()))
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _models.cache_clear()


def is_brief(question: str) -> bool:
    """A question of one sentence or so: at most ``BRIEF_CHARS`` characters of prose."""
    return len(clean_question(question) or question.strip()) <= BRIEF_CHARS


def feature_rows(
    candidates: Sequence[Candidate],
    thread: Thread = EMPTY,
    *,
    brief: bool = False,
    excerpt: Mapping[int, float] | None = None,
    ce: Mapping[int, float] | None = None,
) -> list[dict[str, float]]:
    """The raw features of each candidate (``cosine`` and ``lexical`` must be filled in); the facts and
    topic cosines come from ``thread`` (a candidate it lacks gets no facts), the second model's cosines
    from ``excerpt`` and the cross-encoder's logits from ``ce`` (NaN for a post they lack, or for all
    without them)."""
    excerpt = excerpt or {}
    ce = ce or {}
    top = max((c.lexical or 0.0 for c in candidates), default=0.0)
    best = thread.topic_best()
    for c in candidates:
        if c.cosine is not None and c.cosine > best.get(c.topic_id, -2.0):
            best[c.topic_id] = c.cosine
    b = 1.0 if brief else 0.0
    rows = []
    for c in candidates:
        lex = c.lexical or 0.0
        cosine = c.cosine if c.cosine is not None else 0.0
        lexical = lex / top if top > 0 else 0.0
        facts = thread.facts.get(c.post_id, _NO_FACTS)
        rows.append(
            {
                "cosine": cosine,
                "lexical": lexical,
                "lexical_top": math.log1p(top),
                "first_post": 1.0 if c.post_number == 1 else 0.0,
                "first_reply": float(facts.first_reply),
                "to_question": float(facts.to_question and c.post_number > 1),
                "by_asker": float(facts.by_asker and c.post_number > 1),
                "asker_followed": float(facts.asker_followed),
                "topic_best": best.get(c.topic_id, cosine),
                "brief_cosine": b * cosine,
                "brief_lexical": b * lexical,
                "excerpt_cosine": excerpt.get(c.post_id, math.nan),
                "ce_logit": ce.get(c.post_id, math.nan),
            }
        )
    return rows


def rank(
    model: StageModel,
    candidates: Sequence[Candidate],
    thread: Thread = EMPTY,
    *,
    brief: bool = False,
    excerpt: Mapping[int, float] | None = None,
) -> list[Candidate]:
    """The candidates by second-stage score, best first (stable on ties), ``stage`` set."""
    return rank_rows(model, candidates, feature_rows(candidates, thread, brief=brief, excerpt=excerpt))


def rank_rows(
    model: StageModel, candidates: Sequence[Candidate], rows: Sequence[Mapping[str, float]]
) -> list[Candidate]:
    """``candidates`` by ``model``'s score of their feature ``rows``, best first (stable on ties); with a
    topic score, by topic and share of the topic (``ordering``). ``stage`` is the post score."""
    scores = [model.score(r) for r in rows]
    scored = [replace(c, stage=v) for c, v in zip(candidates, scores, strict=True)]
    return [scored[i] for i in ordering(model, [c.topic_id for c in candidates], scores, rows)]


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _nanmax(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return max(finite) if finite else math.nan


def topic_rows(
    topics: Sequence[int], scores: Sequence[float], rows: Sequence[Mapping[str, float]]
) -> dict[int, dict[str, float]]:
    """Each topic's replies among the candidates pooled into ``TOPIC_FEATURES`` (post ``scores``,
    feature ``rows``); a topic with no reply among them pools its first post. Replies only: an answer
    is a reply, and a question's own topic (in the eval, the gold topic whose first post is the
    question, hidden from retrieval) must not look different for lacking its first post."""
    members: dict[int, list[int]] = {}
    for i, t in enumerate(topics):
        members.setdefault(t, []).append(i)
    out = {}
    for t, every in members.items():
        idx = [i for i in every if not rows[i]["first_post"]] or every
        post = [scores[i] for i in idx]
        out[t] = {
            "best": max(post),
            "pooled": _logsumexp(post),
            "count": math.log(len(idx)),
            "best_excerpt": _nanmax([rows[i]["excerpt_cosine"] for i in idx]),
            "best_lexical": max(rows[i]["lexical"] for i in idx),
            "best_cosine": max(rows[i]["cosine"] for i in idx),
        }
    return out


def ordering(
    model: StageModel, topics: Sequence[int], scores: Sequence[float], rows: Sequence[Mapping[str, float]]
) -> list[int]:
    """Candidate indices best first: by post score, or with a topic score by ``log σ(topic score) +
    within · (post score − log-sum-exp of its topic's post scores)`` (stable on ties)."""
    key = list(scores)
    if model.topic is not None and scores:
        pooled = topic_rows(topics, scores, rows)
        for i, t in enumerate(topics):
            z = model.topic.score(pooled[t])
            log_p = -math.log1p(math.exp(-z)) if z > -30 else z
            key[i] = log_p + model.within * (scores[i] - pooled[t]["pooled"])
    return sorted(range(len(key)), key=lambda i: (-key[i], i))


def question_row(scores: Sequence[float], rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """``QUESTION_FEATURES`` of one question from its candidates' post scores and feature rows."""
    ranked = sorted(scores, reverse=True)
    return {
        "top": ranked[0],
        "gap": ranked[0] - ranked[min(4, len(ranked) - 1)],
        "lexical_top": rows[0]["lexical_top"],
        "top_cosine": max(r["cosine"] for r in rows),
        "top_excerpt": _nanmax([r["excerpt_cosine"] for r in rows]),
        "brief": 1.0 if any(r["brief_cosine"] or r["brief_lexical"] for r in rows) else 0.0,
    }
