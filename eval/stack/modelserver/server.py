"""Starting the local model server: in the foreground (``citebot models serve``) or in a thread (tests)."""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn

from eval.stack.launcher import AppThread
from eval.stack.modelserver.app import Limits, create_app
from eval.stack.modelserver.models import (
    CALIBRATION_PATH,
    BiEncoderScorer,
    Calibration,
    CrossEncoderScorer,
    EmbeddingModel,
    Scorer,
)

log = logging.getLogger(__name__)


def load_models(
    embed_model: Path | None = None,
    cross_encoder: Path | None = None,
    calibration: Path = CALIBRATION_PATH,
) -> tuple[EmbeddingModel, Scorer]:
    """The embedding model (shipped MiniLM by default) and the scorer: a cross-encoder when given,
    else the embedding model's calibrated cosine."""
    embedder = EmbeddingModel(embed_model)
    scorer: Scorer
    if cross_encoder is not None:
        scorer = CrossEncoderScorer(cross_encoder)
    else:
        scorer = BiEncoderScorer(embedder, Calibration.load(calibration))
    log.info(
        "model server: embeddings %s, rerank by %s (%s)", embedder.model_id, scorer.kind, scorer.model_id
    )
    return embedder, scorer


def serve(
    host: str,
    port: int,
    *,
    embed_model: Path | None = None,
    cross_encoder: Path | None = None,
    limits: Limits | None = None,
) -> None:
    """Load the models and serve TEI's contract until interrupted."""
    embedder, scorer = load_models(embed_model, cross_encoder)
    uvicorn.run(create_app(embedder, scorer, limits), host=host, port=port, log_level="warning")


class ModelServerThread(AppThread):
    """The app on a free loopback port, in a daemon thread; a context manager for tests and benches."""

    def __init__(self, embedder: EmbeddingModel, scorer: Scorer, *, limits: Limits | None = None) -> None:
        super().__init__(create_app(embedder, scorer, limits), name="modelserver")
