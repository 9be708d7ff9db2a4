"""Starting the local model server: in the foreground (``citebot models serve``) or in a thread (tests)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from eval.stack.modelserver.app import Limits, create_app
from eval.stack.modelserver.models import (
    CALIBRATION_PATH,
    BiEncoderScorer,
    Calibration,
    CrossEncoderScorer,
    EmbeddingModel,
    Scorer,
)
from eval.stack.redis import free_port

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


class ModelServerThread:
    """The app on a free loopback port, in a daemon thread; a context manager for tests and benches."""

    def __init__(self, embedder: EmbeddingModel, scorer: Scorer, *, limits: Limits | None = None) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            create_app(embedder, scorer, limits), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="modelserver", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the model server did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> ModelServerThread:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
