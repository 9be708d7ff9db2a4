"""The embedder the backfill brings itself: a deterministic null embedder.

``NullEmbedder`` serves the benchmark (fixed vectors: measures the pipeline, not a model) and the tests
(deterministic per-text vectors, a record of every call). Real models come from
``worker.clients.embeddings`` (``backfill.compose.build_embedder``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from worker.domain import EmbedKind


class NullEmbedder:
    """Vectors without a model. ``fixed=True``: one constant unit vector; else a hash of each text."""

    def __init__(self, dimension: int, *, model: str = "null", fixed: bool = False) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self._model = model
        self._dimension = dimension
        self.fixed = fixed
        self.calls = 0
        self.texts_embedded = 0
        self.history: list[tuple[str, ...]] = []
        self._lock = threading.Lock()
        unit = np.ones(dimension, np.float32) / np.sqrt(dimension)
        self._fixed_row = unit

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        return [list(map(float, row)) for row in self.embed_array(texts)]

    def embed_array(self, texts: Sequence[str]) -> NDArray[np.float32]:
        with self._lock:
            self.calls += 1
            self.texts_embedded += len(texts)
            if not self.fixed:
                self.history.append(tuple(texts))
        if self.fixed:
            return np.broadcast_to(self._fixed_row, (len(texts), self._dimension))
        if not texts:
            return np.zeros((0, self._dimension), np.float32)
        return np.stack([self._vector(t) for t in texts])

    def _vector(self, text: str) -> NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        v = np.random.default_rng(seed).standard_normal(self._dimension).astype(np.float32)
        return v / np.linalg.norm(v)
