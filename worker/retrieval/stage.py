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
)
BRIEF_CHARS = 160  # what a member writes to a bot in one sentence (the eval's short questions)
_NO_FACTS = PostFacts()


def model_set_id(embedding_model: str, excerpt_model: str | None = None) -> str:
    """The key of a model set's weights: the recall model, the lexical channel's recipe and, when its
    cosines are a feature, the second bi-encoder."""
    base = f"{embedding_model}+lexical-en"
    return f"{base}+{excerpt_model}" if excerpt_model else base


@dataclass(frozen=True, slots=True)
class StageModel:
    model_set: str
    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    bias: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.features)
        if not (len(self.weights) == len(self.mean) == len(self.std) == n):
            raise ValueError("one weight, mean and std per feature")
        unknown = set(self.features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown second-stage features: {sorted(unknown)}")
        if any(s <= 0 or not math.isfinite(s) for s in self.std):
            raise ValueError("standard deviations must be positive")

    @property
    def scorer_id(self) -> str:
        """The key of this model set's zone thresholds."""
        return f"stage:{self.model_set}"

    def score(self, row: Mapping[str, float]) -> float:
        """The log-odds of ``row``; a missing (NaN) value counts as the feature's mean."""
        return self.bias + sum(
            w * (row[f] - m) / s
            for f, w, m, s in zip(self.features, self.weights, self.mean, self.std, strict=True)
            if not math.isnan(row[f])
        )

    @property
    def uses_excerpt(self) -> bool:
        return "excerpt_cosine" in self.features

    def as_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "weights": [round(w, 6) for w in self.weights],
            "mean": [round(m, 6) for m in self.mean],
            "std": [round(s, 6) for s in self.std],
            "bias": round(self.bias, 6),
        }


def read_weights(path: Path = WEIGHTS_FILE) -> dict[str, Any]:
    if not path.is_file():
        return {"model_sets": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("model_sets"), dict):
        raise ValueError(f"{path}: expected an object with a 'model_sets' object")
    return data


@lru_cache(maxsize=8)
def _models(path: Path) -> Mapping[str, StageModel]:
    out = {}
    for name, row in read_weights(path)["model_sets"].items():
        out[name] = StageModel(
            model_set=name,
            features=tuple(row["features"]),
            weights=tuple(float(x) for x in row["weights"]),
            mean=tuple(float(x) for x in row["mean"]),
            std=tuple(float(x) for x in row["std"]),
            bias=float(row.get("bias", 0.0)),
        )
    return out


def load_model(model_set: str, path: Path = WEIGHTS_FILE) -> StageModel:
    """The fitted weights of ``model_set``; ConfigError (naming the fitting command) when absent."""
    model = _models(path).get(model_set)
    if model is None:
        raise ConfigError(
            f"no second-stage weights for model set {model_set!r} in {path.name}: fit them with "
            "`python -m eval fit-stage`, or set CITEBOT_RETRIEVAL__SECOND_STAGE=false"
        )
    return model


def write_model(model: StageModel, figures: Mapping[str, Any], path: Path = WEIGHTS_FILE) -> None:
    """Record ``model``'s weights with how they were fitted (other model sets are kept)."""
    data = read_weights(path)
    data["model_sets"][model.model_set] = {**model.as_dict(), **figures}
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
) -> list[dict[str, float]]:
    """The raw features of each candidate (``cosine`` and ``lexical`` must be filled in); the facts and
    topic cosines come from ``thread`` (a candidate it lacks gets no facts), the second model's cosines
    from ``excerpt`` (NaN for a post it lacks, or for all without it)."""
    excerpt = excerpt or {}
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
    """``candidates`` by ``model``'s score of their feature ``rows``, best first (stable on ties)."""
    scored = [replace(c, stage=model.score(r)) for c, r in zip(candidates, rows, strict=True)]
    order = sorted(range(len(scored)), key=lambda i: (-(scored[i].stage or 0.0), i))
    return [scored[i] for i in order]
