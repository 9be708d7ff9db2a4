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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from worker.domain import EmbedKind
from worker.errors import CitebotError
from worker.protocols import Embedder, Reranker

_WORD = regex.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits of any script)."""
    return [w.lower() for w in _WORD.findall(text)]


@dataclass(frozen=True, slots=True)
class EmbedCall:
    texts: tuple[str, ...]
    kind: EmbedKind


@dataclass(frozen=True, slots=True)
class RerankCall:
    query: str
    texts: tuple[str, ...]


class FakeEmbedder(Embedder):
    """Deterministic hashed bag-of-words unit vectors; the same text always gets the same vector."""

    def __init__(self, *, model: str = "fake-embedder", dimension: int = 8) -> None:
        self._model = model
        self._dimension = dimension
        self.calls: list[EmbedCall] = []
        self.fail_with: CitebotError | None = None

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        self.calls.append(EmbedCall(tuple(texts), kind))
        if self.fail_with is not None:
            raise self.fail_with
        return [self.vector(t) for t in texts]

    def vector(self, text: str) -> list[float]:
        """The vector of one text (no call recorded): a signed hash of each word, summed, normalised."""
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
