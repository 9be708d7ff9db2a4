"""An eval-time cache of the second bi-encoder's excerpt vectors, so the eval need not re-embed them.

all-mpnet-base-v2 embeds 5–10 excerpts a second on this machine's two cores: filling the column of the
whole archive for every eval index would take hours. The vectors of every eligible archive post's
excerpt can be computed once (with the same model, normalised, fp32) into an ``.npz`` with arrays
``sha`` (hex sha256 of the excerpt text, utf-8, as ``S64``) and ``vec`` (float32, one row per
excerpt). ``CachedEmbedder`` answers a passage from that file when its text's sha is there, and
embeds it with the real model otherwise (a changed post, another export); questions are always
embedded by the real model. So the column the eval fills holds the same vectors the backfill would
write; only the time is saved, and the backfill's cost of the column is measured apart
(``python -m eval.bench excerpts``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from worker.domain import EmbedKind
from worker.protocols import Embedder

log = logging.getLogger(__name__)


def text_sha(text: str) -> bytes:
    """The cache's key of a text: its sha256 in hex, as bytes (the ``S64`` entries)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest().encode("ascii")


class CachedEmbedder:
    """``live``'s vectors, read from ``path`` for the passages it holds (see the module docstring)."""

    def __init__(self, live: Embedder, path: Path) -> None:
        self.live = live
        with np.load(path) as data:
            shas, vecs = data["sha"], np.asarray(data["vec"], dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != live.dimension:
            raise ValueError(f"{path}: vectors of shape {vecs.shape}, the model makes {live.dimension}-d")
        self._rows = {bytes(s): i for i, s in enumerate(shas)}
        self._vecs = vecs
        self.hits = 0
        self.misses = 0

    @property
    def model(self) -> str:
        return self.live.model

    @property
    def dimension(self) -> int:
        return self.live.dimension

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        if kind == "query":
            return self.live.embed(texts, kind=kind)
        rows = [self._rows.get(text_sha(t)) for t in texts]
        missing = [i for i, r in enumerate(rows) if r is None]
        live = self.live.embed([texts[i] for i in missing], kind=kind) if missing else []
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        fresh = dict(zip(missing, live, strict=True))
        return [fresh[i] if r is None else self._vecs[r].tolist() for i, r in enumerate(rows)]
