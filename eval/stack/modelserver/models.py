"""The models behind the local model server: an embedding model and a relevance scorer.

Two scorers answer ``/rerank``, and ``/info`` says which one is serving:

- ``cross-encoder``: a sentence-transformers ``CrossEncoder`` loaded from a local directory (none ships
  on PyPI, so the operator points at one). Its raw output is the logit, exactly what TEI returns with
  ``raw_scores: true``.
- ``calibrated-bi-encoder``: the embedding model's cosine between question and text, turned into a
  relevance logit by ``logit = a·cos + b`` (``calibration.json``, fitted by ``calibrate.py`` on labelled
  forum questions) so that the zone thresholds keep their meaning: −4 ≈ 2 %, 0 = 50 % relevance.

Heavy imports (torch, sentence-transformers) happen when a model is loaded, never at import time.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from worker.clients.local_embedder import embedding_dimension, load_sentence_transformer, shipped_model_path
from worker.errors import ConfigError

CALIBRATION_PATH = Path(__file__).with_name("calibration.json")
SHIPPED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True, slots=True)
class Calibration:
    """``logit = a·cos + b``: cosine similarity → log-odds that the text is relevant to the question."""

    a: float
    b: float
    model_id: str

    @classmethod
    def load(cls, path: Path = CALIBRATION_PATH) -> Calibration:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(a=float(data["a"]), b=float(data["b"]), model_id=str(data["model_id"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"cannot read the calibration {str(path)!r}: {exc}") from None

    def logit(self, cosine: float) -> float:
        return self.a * cosine + self.b

    def cosine_at(self, logit: float) -> float:
        """The cosine whose calibrated logit is ``logit`` (for documentation and reports)."""
        return (logit - self.b) / self.a


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class EmbeddingModel:
    """A sentence-transformers bi-encoder; thread-safe (one forward pass at a time)."""

    def __init__(self, path: Path | None = None, *, model_id: str | None = None) -> None:
        self.path = path or shipped_model_path()
        self.model_id = model_id or (SHIPPED_MODEL_ID if path is None else self.path.name)
        self._model: Any = load_sentence_transformer(self.path)
        self.dimension = embedding_dimension(self._model)
        self.max_input_length = int(self._model.max_seq_length)
        self.pooling = _pooling(self._model)
        self._lock = threading.Lock()

    def count_tokens(self, text: str, pair: str | None = None) -> int:
        """Tokens the model would read, special tokens included, before truncation."""
        tokenizer = self._model.tokenizer
        if pair is None:
            return len(tokenizer(text, add_special_tokens=True)["input_ids"])
        return len(tokenizer(text, pair, add_special_tokens=True)["input_ids"])

    def embed(self, texts: Sequence[str], *, normalize: bool = True) -> np.ndarray:
        with self._lock:
            matrix: np.ndarray = self._model.encode(
                list(texts),
                batch_size=32,
                normalize_embeddings=normalize,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return matrix.astype(np.float32, copy=False)


def _pooling(model: Any) -> str:
    for module in model:
        mode = getattr(module, "get_pooling_mode_str", None)
        if callable(mode):
            return str(mode())
    return "mean"


class Scorer(Protocol):
    kind: str
    model_id: str
    max_input_length: int

    def logits(self, query: str, texts: Sequence[str]) -> list[float]: ...

    def count_tokens(self, query: str, text: str) -> int: ...


class BiEncoderScorer:
    """Calibrated cosine of the embedding model: a stand-in for a cross-encoder."""

    kind = "calibrated-bi-encoder"

    def __init__(
        self, embedder: EmbeddingModel, calibration: Calibration, *, cache_size: int = 50_000
    ) -> None:
        if calibration.model_id != embedder.model_id:
            raise ConfigError(
                f"calibration was fitted for {calibration.model_id!r}, not {embedder.model_id!r}; "
                "refit it with `python -m eval.stack.modelserver.calibrate`"
            )
        self.embedder = embedder
        self.calibration = calibration
        self.model_id = embedder.model_id
        self.max_input_length = embedder.max_input_length
        # The same posts come back for question after question (eval, bench, a busy topic): a
        # cross-encoder must read every pair again, a bi-encoder need embed each text only once.
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    def cosines(self, query: str, texts: Sequence[str]) -> np.ndarray:
        with self._cache_lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
            for t in known:
                self._cache.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        vectors = self.embedder.embed([query, *missing], normalize=True)
        fresh = dict(zip(missing, vectors[1:], strict=True))
        with self._cache_lock:
            self._cache.update(fresh)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        matrix = np.stack([known[t] if t in known else fresh[t] for t in texts])
        cosines: np.ndarray = matrix @ vectors[0]
        return cosines

    def logits(self, query: str, texts: Sequence[str]) -> list[float]:
        return [self.calibration.logit(float(c)) for c in self.cosines(query, texts)]

    def count_tokens(self, query: str, text: str) -> int:
        # The bi-encoder reads question and text separately; the longer one is what may not fit.
        return max(self.embedder.count_tokens(query), self.embedder.count_tokens(text))


class CrossEncoderScorer:
    """A sentence-transformers ``CrossEncoder`` from a local directory, returning raw logits."""

    kind = "cross-encoder"

    def __init__(self, path: Path) -> None:
        if not path.is_dir():
            raise ConfigError(f"cross-encoder directory {str(path)!r} does not exist")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub: local weights only
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import CrossEncoder

        self._model: Any = CrossEncoder(
            str(path), device="cpu", local_files_only=True, activation_fn=torch.nn.Identity()
        )
        self.model_id = path.name
        limit = getattr(self._model, "max_seq_length", None)  # `max_length` before sentence-transformers 6
        self.max_input_length = int(limit or 512)
        self._lock = threading.Lock()

    def logits(self, query: str, texts: Sequence[str]) -> list[float]:
        with self._lock:
            out = self._model.predict(
                [(query, t) for t in texts], batch_size=32, show_progress_bar=False, convert_to_numpy=True
            )
        return [float(x) for x in np.asarray(out).reshape(len(texts), -1)[:, 0]]

    def count_tokens(self, query: str, text: str) -> int:
        return len(self._model.tokenizer(query, text, add_special_tokens=True)["input_ids"])
