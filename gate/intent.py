"""The gate's second layer: the question's intent judged on its embedding, after the rules.

The pipeline already embeds every question for recall (the same model as the index); this layer
reuses that vector, so it costs no model call, only two small matrix-vector products.

What it holds (``gate/intent/<model>.json``, one file per embedding model, written by
``make gate`` (``gate.train.intent``) from the exemplars, ``eval/data/gate/training/exemplars.jsonl``,
a training set like the others: nothing reads that file at run time):

- the embeddings of the labelled exemplars: harmful requests (with their category) and benign
  look-alikes and ordinary forum questions, French and English, written for each category and never
  copied from a test set; stored as float16;
- ``k`` and ``threshold``: the score is the mean similarity of the ``k`` nearest harmful exemplars
  minus that of the ``k`` nearest benign ones, and the layer hits at ``threshold`` or above. The
  threshold is calibrated so that no real forum question is blocked (``docs/gate.md``);
- optionally a linear head (``weights``, ``bias``: a logistic regression fitted on labelled
  harmful and benign questions and real forum posts): then the score is its logit
  ``weights · v + bias`` and the threshold is on that logit; the nearest exemplars still give the
  category;
- optionally ``lexical_floor`` (and ``lexical_sha256``, the ``gate/lexical.json`` it was set
  for): a hit also needs the gate's lexical head to score the question at that logit or above.
  MiniLM puts short, contentless forum replies ("That is what I've done at this point.") near
  harmful requests; their words score far below any request's, so the floor keeps the layer to
  questions whose words already lean harmful, and the layer's false blocks over the whole archive
  can be counted by embedding only the posts at or above the floor;
- optionally ``lexical_weight`` and ``lexical_clip`` (a stacked head; needs the floor and the
  linear head): the logit is ``weights · v + bias + lexical_weight · clip(lexical score,
  *lexical_clip)``, one regression over the embedding and the lexical head's logit, so that two
  signals each too weak to block alone add up (the lexical logit it was fitted on is the head's
  out-of-fold score of each training line: what it scores a question it has not seen);
- optionally ``rule_veto`` (needs the stacked head): a logit far below the threshold. A hit of a
  rule with a benign reading (not ``strict``) whose question the stacked head scores under it is
  dropped, as the lexical head's own veto drops one (:meth:`IntentLayer.vetoes_rule`; the pipeline
  asks it only where the layer is on). It is set where at most a small share of the harmful
  training lines such rules block score under it out of fold; strict rules are never vetoed;
- ``model``, ``dimension`` and ``exemplars_sha256``: the vector space the exemplars belong to and
  the exemplars that made them. A vector of another size is refused (``IntentError``).

``category`` is the category most frequent among the ``k`` nearest harmful exemplars (the nearest
breaks ties). Deterministic: fixed vectors, no randomness, no network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

BENIGN = "benign"
FORMAT_VERSION = 1


class IntentError(ValueError):
    """The weights file is unusable, or a vector does not belong to its model."""


@dataclass(frozen=True, slots=True)
class IntentDecision:
    """What the embedding layer decided: ``category`` is the category of the nearest harmful
    exemplars (set even below the threshold, for the trace), ``score`` the similarity margin."""

    hit: bool
    category: str
    score: float
    threshold: float


def model_slug(model: str) -> str:
    """The file name part of a model id (``sentence-transformers/all-MiniLM-L6-v2``: ``all-MiniLM-L6-v2``)."""
    return model.rstrip("/").rsplit("/", 1)[-1]


def exemplars_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class IntentLayer:
    """Nearest labelled exemplars for one embedding model."""

    def __init__(
        self,
        *,
        model: str,
        harmful: Any,
        labels: Sequence[str],
        benign: Any,
        k: int,
        threshold: float,
        exemplars_sha256: str = "",
        source: str = "",
        info: dict[str, Any] | None = None,
        weights: Any | None = None,
        bias: float = 0.0,
        lexical_floor: float | None = None,
        lexical_sha256: str = "",
        lexical_weight: float | None = None,
        lexical_clip: tuple[float, float] = (-8.0, 12.0),
        rule_veto: float | None = None,
    ) -> None:
        self.model = model
        self.harmful = np.asarray(harmful, dtype=np.float32)
        self.labels = tuple(labels)
        self.benign = np.asarray(benign, dtype=np.float32)
        self.k = int(k)
        self.threshold = float(threshold)
        self.exemplars_sha256 = exemplars_sha256
        self.source = source
        self.info = dict(info or {})
        if self.harmful.ndim != 2 or self.benign.ndim != 2 or self.harmful.shape[1] != self.benign.shape[1]:
            raise IntentError(f"{source}: harmful and benign exemplars must be matrices of one width")
        if len(self.labels) != self.harmful.shape[0] or BENIGN in self.labels:
            raise IntentError(f"{source}: one harmful category per harmful exemplar")
        if not 1 <= self.k <= min(self.harmful.shape[0], self.benign.shape[0]):
            raise IntentError(f"{source}: k must be between 1 and the number of exemplars of a side")
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float32)
        self.bias = float(bias)
        self.lexical_floor = None if lexical_floor is None else float(lexical_floor)
        self.lexical_sha256 = lexical_sha256
        if self.lexical_floor is not None and not math.isfinite(self.lexical_floor):
            raise IntentError(f"{source}: the lexical floor must be a finite logit")
        self.lexical_weight = None if lexical_weight is None else float(lexical_weight)
        low, high = (float(v) for v in lexical_clip)
        self.lexical_clip = (low, high)
        if self.lexical_weight is not None:
            if weights is None or self.lexical_floor is None:
                raise IntentError(f"{source}: a lexical weight needs the linear head and a lexical floor")
            if not (math.isfinite(self.lexical_weight) and math.isfinite(low) and math.isfinite(high)):
                raise IntentError(f"{source}: the lexical weight and clip must be finite")
            if not low < high:
                raise IntentError(f"{source}: the lexical clip must be an interval (low < high)")
        self.rule_veto = None if rule_veto is None else float(rule_veto)
        if self.rule_veto is not None:
            if self.lexical_weight is None:
                raise IntentError(f"{source}: a rule veto needs the stacked head (a lexical weight)")
            if not (math.isfinite(self.rule_veto) and self.rule_veto < self.threshold):
                raise IntentError(f"{source}: the rule veto must be a finite logit below the threshold")
        if self.weights is not None:
            if self.weights.shape != (self.harmful.shape[1],) or not np.isfinite(self.weights).all():
                raise IntentError(f"{source}: the linear head needs one finite weight per dimension")
            if not (math.isfinite(self.bias) and math.isfinite(self.threshold)):
                raise IntentError(f"{source}: the linear head's bias and threshold must be finite")
        elif not -1.0 <= self.threshold <= 2.0:
            raise IntentError(f"{source}: threshold must be a similarity margin, got {self.threshold}")
        if not (np.isfinite(self.harmful).all() and np.isfinite(self.benign).all()):
            raise IntentError(f"{source}: exemplar vectors must be finite numbers")

    @property
    def dimension(self) -> int:
        return int(self.harmful.shape[1])

    @property
    def categories(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.labels)))

    @classmethod
    def load(
        cls, path: Path | str | None = None, *, model: str = "sentence-transformers/all-MiniLM-L6-v2"
    ) -> IntentLayer:
        """The exemplars in ``path``, or the shipped ones for ``model``; IntentError if there are none."""
        if path is None:
            name = f"{model_slug(model)}.json"
            entry = resources.files("gate").joinpath("intent", name)
            if not entry.is_file():
                raise IntentError(
                    f"no intent exemplars for embedding model {model!r} (gate/intent/{name}); "
                    "embed them with `make gate` or turn the layer off"
                )
            text, source = entry.read_text(encoding="utf-8"), f"gate/intent/{name} (shipped)"
        else:
            source = str(path)
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise IntentError(f"{source}: cannot read the file: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise IntentError(f"{source}: not valid JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise IntentError(f"{source}: 'version' must be {FORMAT_VERSION}")
        try:
            dimension = int(data["dimension"])
            layer = cls(
                model=str(data["model"]),
                harmful=_matrix(data["harmful"], dimension),
                labels=[str(label) for label in data["labels"]],
                benign=_matrix(data["benign"], dimension),
                k=data["k"],
                threshold=data["threshold"],
                exemplars_sha256=str(data.get("exemplars_sha256", "")),
                source=source,
                info=data.get("info", {}),
                weights=_vector(data["weights"], dimension) if "weights" in data else None,
                bias=float(data.get("bias", 0.0)),
                lexical_floor=None if data.get("lexical_floor") is None else float(data["lexical_floor"]),
                lexical_sha256=str(data.get("lexical_sha256", "")),
                lexical_weight=None if data.get("lexical_weight") is None else float(data["lexical_weight"]),
                lexical_clip=tuple(data.get("lexical_clip", (-8.0, 12.0))),
                rule_veto=None if data.get("rule_veto") is None else float(data["rule_veto"]),
            )
        except IntentError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise IntentError(f"{source}: malformed exemplars file: {exc!r}") from None
        if path is None and layer.model != model:
            raise IntentError(f"{source}: embedded with {layer.model!r}, not {model!r}")
        return layer

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "version": FORMAT_VERSION,
                "model": self.model,
                "dimension": self.dimension,
                "exemplars_sha256": self.exemplars_sha256,
                "k": self.k,
                "threshold": round(self.threshold, 6),
                "labels": list(self.labels),
                "harmful": _encode(self.harmful),
                "benign": _encode(self.benign),
                "info": self.info,
            }
            | (
                {}
                if self.lexical_floor is None
                else {"lexical_floor": round(self.lexical_floor, 4), "lexical_sha256": self.lexical_sha256}
            )
            | (
                {}
                if self.weights is None
                else {"weights": _encode(self.weights, "<f4"), "bias": round(self.bias, 6)}
            )
            | (
                {}
                if self.lexical_weight is None
                else {
                    "lexical_weight": round(self.lexical_weight, 6),
                    "lexical_clip": list(self.lexical_clip),
                }
            )
            | ({} if self.rule_veto is None else {"rule_veto": round(self.rule_veto, 4)})
        )

    def check(self, vector: Sequence[float] | Any, *, lexical_score: float | None = None) -> IntentDecision:
        """Judge one question by its embedding. Raises IntentError for a vector of the wrong size.

        With a ``lexical_floor``, a hit also needs the lexical head's logit for the same question
        (``GateDecision.lexical_score``) at the floor or above; without that score it never hits.
        With a ``lexical_weight``, that logit (clipped) is also a term of the score; without it the
        score is the embedding's part alone (for the trace) and never hits."""
        v = np.asarray(vector, dtype=np.float32)
        if v.shape != (self.dimension,):
            raise IntentError(
                f"the intent layer takes {self.dimension}-d vectors of {self.model}, got shape {v.shape}"
            )
        to_harmful = self.harmful @ v
        nearest = np.argsort(-to_harmful, kind="stable")[: self.k]
        if self.weights is not None:
            score = float(self.weights @ v + self.bias)
            if self.lexical_weight is not None and lexical_score is not None:
                low, high = self.lexical_clip
                score += self.lexical_weight * min(max(float(lexical_score), low), high)
        else:
            top_benign = np.sort(self.benign @ v)[-self.k :]
            score = float(to_harmful[nearest].mean() - top_benign.mean())
        if math.isnan(score):
            score = -1.0
        votes = [self.labels[i] for i in nearest]
        category = max(votes, key=lambda c: (votes.count(c), -votes.index(c)))
        hit = score >= self.threshold
        if self.lexical_floor is not None:
            hit = hit and lexical_score is not None and lexical_score >= self.lexical_floor
        return IntentDecision(hit, category, round(score, 4), self.threshold)

    def vetoes_rule(self, decision: IntentDecision, *, lexical_score: float | None) -> bool:
        """Whether ``decision`` (this layer's, for a question a rule with a benign reading hit) reads
        the question as a look-alike: a rule veto is set, the lexical head's logit was part of the
        score (without it the score is not the stacked one the veto was set on), and the score is
        under the veto."""
        return self.rule_veto is not None and lexical_score is not None and decision.score < self.rule_veto


def _encode(matrix: Any, dtype: str = "<f2") -> str:
    return base64.b64encode(np.asarray(matrix, dtype=dtype).tobytes()).decode("ascii")


def _vector(encoded: object, dimension: int) -> Any:
    """The linear head's weights: base64 float32, one per dimension."""
    if not isinstance(encoded, str):
        raise IntentError("the linear head's weights must be base64 float32 text")
    values = np.frombuffer(base64.b64decode(encoded.encode("ascii"), validate=True), dtype="<f4")
    if values.size != dimension:
        raise IntentError(f"the linear head has {values.size} weights for {dimension}-d vectors")
    return values.astype(np.float32)


def _matrix(encoded: object, dimension: int) -> Any:
    if not isinstance(encoded, str) or dimension <= 0:
        raise IntentError("exemplar vectors must be base64 float16 text")
    raw = base64.b64decode(encoded.encode("ascii"), validate=True)
    values = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    if values.size % dimension:
        raise IntentError(f"exemplar vectors are not a whole number of {dimension}-d rows")
    return values.reshape(-1, dimension)
