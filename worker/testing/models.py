"""In-memory test doubles of the model services: ``FakeEmbedder`` and ``FakeReranker``.

They are real implementations of the protocols, deterministic, and they record every call (``calls``)
so a test can assert what the pipeline asked for. They behave enough like the real models to make
retrieval tests meaningful: ``FakeEmbedder`` is a hashed bag of words (texts sharing words are close),
``FakeReranker`` gives a logit that grows with the share of the question's words found in the text.
Set ``fail_with`` to an error to make the next calls raise it (a service that is down).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import regex
from numpy.typing import NDArray

from worker.domain import EmbedKind
from worker.errors import CitebotError
from worker.protocols import Embedder, Reranker

_WORD = regex.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script)."""
    return [w.lower() for w in _WORD.findall(text)]


class EmbedCall(NamedTuple):
    """One ``embed`` call (a tuple too: ``((texts...), kind)``)."""

    texts: tuple[str, ...]
    kind: EmbedKind


class RerankCall(NamedTuple):
    """One ``rerank`` call (a tuple too: ``(query, (texts...))``)."""

    query: str
    texts: tuple[str, ...]


class FakeEmbedder(Embedder):
    """Deterministic unit vectors without a model; the same text always gets the same vector.

    A hashed bag of words by default (texts sharing words are close); ``table`` pins the vectors of exact
    texts (normalised); ``fixed=True`` gives every text one constant unit vector and records no texts (the
    backfill bench: it measures the pipeline, not a model). ``calls`` records each call, ``texts_embedded``
    counts the texts; ``before`` runs inside each call (a test's barrier or delay), then ``fail_with``, if
    set, is raised (a service that is down). ``embed_array`` is the numpy form the backfill prefers.
    Thread-safe."""

    def __init__(
        self,
        *,
        model: str = "fake-embedder",
        dimension: int = 8,
        table: Mapping[str, Sequence[float]] | None = None,
        fixed: bool = False,
        before: Callable[[], None] | None = None,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self._model = model
        self._dimension = dimension
        self._table = {text: _unit(v) for text, v in (table or {}).items()}
        self.fixed = fixed
        self.before = before
        self.calls: list[EmbedCall] = []
        self.texts_embedded = 0
        self.fail_with: CitebotError | None = None
        self._lock = threading.Lock()
        self._fixed_row = np.full(dimension, 1 / math.sqrt(dimension), np.float32)

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        self._record(texts, kind)
        if self.fixed:
            return [list(map(float, self._fixed_row)) for _ in texts]
        return [self.vector(t) for t in texts]

    def embed_array(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """``embed(texts, kind="passage")`` as one float32 array (fixed: a broadcast view, no copy)."""
        self._record(texts, "passage")
        if self.fixed:
            return np.broadcast_to(self._fixed_row, (len(texts), self._dimension))
        return np.array([self.vector(t) for t in texts], np.float32).reshape(len(texts), self._dimension)

    def _record(self, texts: Sequence[str], kind: EmbedKind) -> None:
        with self._lock:
            self.texts_embedded += len(texts)
            if not self.fixed:
                self.calls.append(EmbedCall(tuple(texts), kind))
        if self.before is not None:
            self.before()
        if self.fail_with is not None:
            raise self.fail_with

    def vector(self, text: str) -> list[float]:
        """The vector of one text (no call recorded): the table's, else a signed hash of each word,
        summed, normalised."""
        pinned = self._table.get(text)
        if pinned is not None:
            return list(pinned)
        acc = [0.0] * self._dimension
        for word in words(text) or [text]:
            digest = hashlib.sha256(word.encode("utf-8")).digest()
            index = int.from_bytes(digest[:4], "big") % self._dimension
            acc[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(math.fsum(x * x for x in acc))
        if norm == 0.0:  # words cancelled out: fall back to a one-hot of the whole text
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            acc[int.from_bytes(digest[:4], "big") % self._dimension] = 1.0
            norm = 1.0
        return [x / norm for x in acc]


def _unit(values: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in values))
    return [float(x) / norm for x in values]


def overlap_logit(query: str, text: str) -> float:
    """−6 when the text shares none of the question's words, +6 when it has them all."""
    q = set(words(query))
    if not q:
        return -6.0
    share = len(q & set(words(text))) / len(q)
    return 12.0 * share - 6.0


def tei_embed_body(embedder: Embedder, body: Mapping[str, Any]) -> tuple[int, Any]:
    """TEI's ``POST /embed`` over ``embedder``: (status, JSON body), 400 ``Empty`` for no inputs."""
    inputs = body.get("inputs")
    texts = [inputs] if isinstance(inputs, str) else [str(t) for t in (inputs or [])]
    if not texts:
        return 400, {"error": "`inputs` cannot be empty", "error_type": "Empty"}
    return 200, embedder.embed(texts)


def tei_rerank_body(body: Mapping[str, Any]) -> list[dict[str, float]]:
    """TEI's ``POST /rerank`` with word-overlap logits: sigmoid unless ``raw_scores``, best first."""
    query = str(body["query"])
    scores = [overlap_logit(query, str(t)) for t in body["texts"]]
    if not body.get("raw_scores"):
        scores = [1 / (1 + math.exp(-s)) for s in scores]
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [{"index": i, "score": scores[i]} for i in ranked]


def tei_info_body(
    model_id: str, kind: str = "reranker", *, max_client_batch_size: int = 32
) -> dict[str, Any]:
    """TEI's ``GET /info``: ``model_type`` names exactly one kind (TEI serves one model), with its
    fields (a single-label cross-encoder's ``id2label``/``label2id``, an embedder's pooling)."""
    kinds: dict[str, dict[str, Any]] = {
        "reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}},
        "embedding": {"pooling": "mean"},
    }
    return {
        "model_id": model_id,
        "model_dtype": "float32",
        "model_type": {kind: kinds[kind]},
        "max_concurrent_requests": 512,
        "max_input_length": 512,
        "max_batch_tokens": 16384,
        "max_client_batch_size": max_client_batch_size,
        "auto_truncate": True,
        "tokenization_workers": 1,
        "version": "1.5.0",
    }


class FakeReranker(Reranker):
    """Word-overlap logits, or canned ones: ``scores[text]`` wins over ``score_fn`` when given."""

    def __init__(
        self,
        *,
        name: str = "fake-reranker",
        scores: Mapping[str, float] | None = None,
        score_fn: Callable[[str, str], float] = overlap_logit,
    ) -> None:
        self._name = name
        self._scores = dict(scores or {})
        self._score_fn = score_fn
        self.calls: list[RerankCall] = []
        self.fail_with: CitebotError | None = None

    @property
    def name(self) -> str:
        return self._name

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append(RerankCall(query, tuple(texts)))
        if self.fail_with is not None:
            raise self.fail_with
        return [self._scores[t] if t in self._scores else self._score_fn(query, t) for t in texts]
