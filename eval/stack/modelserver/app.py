"""The local model server's HTTP app: TEI's exact contract over local models.

Routes, bodies, status codes and error bodies follow text-embeddings-inference (router/src/http):

- ``POST /embed {inputs: str | [str], truncate?, normalize? = true}`` → ``[[float]]``
- ``POST /rerank {query, texts, raw_scores? = false, truncate?, return_text? = false}`` →
  ``[{index, score[, text]}]`` sorted by score, best first; without ``raw_scores`` the score is the
  sigmoid of the logit (a single-label cross-encoder), with it the logit itself.
- ``GET /health`` → 200 with an empty body; ``GET /info`` → model id, model type, limits, plus
  ``scorer`` (``cross-encoder`` or ``calibrated-bi-encoder``) and its calibration.
- Errors ``{"error", "error_type"}``: 400 ``Empty``, 422 ``Validation`` (batch above
  ``max_client_batch_size``; input longer than ``max_input_length`` without ``truncate``), 429
  ``Overloaded`` (every text holds one of ``max_concurrent_requests`` slots), 424 ``Backend``.
  Like axum: a body over the payload limit is a plain-text 413, malformed JSON a plain-text 400,
  a body of the wrong shape a plain-text 422.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from eval.stack.modelserver.models import BiEncoderScorer, EmbeddingModel, Scorer, sigmoid

log = logging.getLogger(__name__)

VERSION = "citebot-modelserver/0.1 (TEI 1.x contract)"
_STATUS = {
    "Unhealthy": 503,
    "Backend": 424,
    "Overloaded": 429,
    "Validation": 422,
    "Tokenizer": 422,
    "Empty": 400,
}


@dataclass(frozen=True, slots=True)
class Limits:
    """TEI's router parameters (its defaults, but for ``max_concurrent_requests``)."""

    max_client_batch_size: int = 32
    max_concurrent_requests: int = 512
    max_batch_tokens: int = 16384
    payload_limit: int = 2_000_000
    auto_truncate: bool = False


class _TeiError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message, "error_type": self.error_type}, _STATUS[self.error_type])


class _Plain(Exception):
    """An error axum answers in plain text before the handler runs (body limit, bad JSON)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Slots:
    """TEI's concurrency semaphore: each text takes a slot; none free → 429 Overloaded."""

    def __init__(self, total: int) -> None:
        self._free = total
        self._lock = threading.Lock()

    def acquire(self, n: int) -> None:
        with self._lock:
            if n > self._free:
                raise _TeiError("Overloaded", "Model is overloaded")
            self._free -= n

    def release(self, n: int) -> None:
        with self._lock:
            self._free += n


def create_app(embedder: EmbeddingModel, scorer: Scorer, limits: Limits | None = None) -> Starlette:
    """The Starlette app serving ``embedder`` on ``/embed`` and ``scorer`` on ``/rerank``."""
    lim = limits or Limits()
    slots = _Slots(lim.max_concurrent_requests)

    async def read_json(request: Request) -> dict[str, Any]:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > lim.payload_limit:
                raise _Plain(413, "Failed to buffer the request body: length limit exceeded")
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise _Plain(400, f"Failed to parse the request body as JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _Plain(422, "Failed to deserialize the JSON body into the target type: expected a map")
        return data

    def field(data: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if name not in data or data[name] is None:
            if default is ...:
                raise _Plain(
                    422, f"Failed to deserialize the JSON body into the target type: missing field `{name}`"
                )
            return default
        value = data[name]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise _Plain(
                422, f"Failed to deserialize the JSON body into the target type: `{name}`: invalid type"
            )
        return value

    def check_batch(n: int, what: str) -> None:
        if n == 0:
            raise _TeiError("Empty", f"`{what}` cannot be empty")
        if n > lim.max_client_batch_size:
            raise _TeiError(
                "Validation", f"batch size {n} > maximum allowed batch size {lim.max_client_batch_size}"
            )

    def check_length(tokens: int, limit: int) -> None:
        if tokens > limit:
            raise _TeiError(
                "Validation",
                f"Input validation error: `inputs` must have less than {limit} tokens. Given: {tokens}",
            )

    async def run(work: Callable[[], Any], n: int) -> Any:
        slots.acquire(n)
        try:
            return await run_in_threadpool(work)
        except _TeiError:
            raise
        except Exception as exc:  # a model failure is TEI's 424 Backend, never a bare 500
            log.exception("model failure")
            raise _TeiError("Backend", f"Backend error: {type(exc).__name__}") from None
        finally:
            slots.release(n)

    async def embed(request: Request) -> Response:
        data = await read_json(request)
        inputs = field(data, "inputs", (str, list))
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not all(isinstance(t, str) for t in texts):
            raise _Plain(
                422, "Failed to deserialize the JSON body into the target type: `inputs`: invalid type"
            )
        truncate = field(data, "truncate", bool, lim.auto_truncate)
        normalize = field(data, "normalize", bool, True)
        check_batch(len(texts), "inputs")
        if not truncate:
            for text in texts:
                check_length(embedder.count_tokens(text), embedder.max_input_length)
        matrix = await run(lambda: embedder.embed(texts, normalize=normalize), len(texts))
        return JSONResponse([[float(x) for x in row] for row in matrix])

    async def rerank(request: Request) -> Response:
        data = await read_json(request)
        query = field(data, "query", str)
        texts = field(data, "texts", list)
        if not all(isinstance(t, str) for t in texts):
            raise _Plain(
                422, "Failed to deserialize the JSON body into the target type: `texts`: invalid type"
            )
        raw_scores = field(data, "raw_scores", bool, False)
        return_text = field(data, "return_text", bool, False)
        truncate = field(data, "truncate", bool, lim.auto_truncate)
        check_batch(len(texts), "texts")
        if not truncate:
            for text in texts:
                check_length(scorer.count_tokens(query, text), scorer.max_input_length)
        logits: list[float] = await run(lambda: scorer.logits(query, texts), len(texts))
        ranks = []
        for index, logit in enumerate(logits):
            rank: dict[str, Any] = {"index": index}
            if return_text:
                rank["text"] = texts[index]
            rank["score"] = logit if raw_scores else sigmoid(logit)
            ranks.append(rank)
        ranks.sort(key=lambda r: r["score"], reverse=True)
        return JSONResponse(ranks)

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def info(request: Request) -> Response:
        return JSONResponse(describe(embedder, scorer, lim))

    async def on_tei_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _TeiError)  # noqa: S101 - registered for this type only
        return exc.response()

    async def on_plain(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Plain)  # noqa: S101 - registered for this type only
        return PlainTextResponse(exc.message, exc.status)

    return Starlette(
        routes=[
            Route("/embed", embed, methods=["POST"]),
            Route("/rerank", rerank, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/info", info, methods=["GET"]),
        ],
        exception_handlers={_TeiError: on_tei_error, _Plain: on_plain},
    )


def describe(embedder: EmbeddingModel, scorer: Scorer, lim: Limits) -> dict[str, Any]:
    """TEI's ``/info`` for this server, with what is serving ``/rerank`` said plainly."""
    calibration = None
    if isinstance(scorer, BiEncoderScorer):
        c = scorer.calibration
        calibration = {"a": c.a, "b": c.b, "model_id": c.model_id}
    return {
        "model_id": embedder.model_id,
        "model_sha": None,
        "model_dtype": "float32",
        "served_model_name": embedder.model_id,
        # Real TEI serves one model and names one type; this server serves both routes.
        "model_type": {
            "embedding": {"pooling": embedder.pooling},
            "reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}},
        },
        "max_concurrent_requests": lim.max_concurrent_requests,
        "max_input_length": embedder.max_input_length,
        "max_batch_tokens": lim.max_batch_tokens,
        "max_batch_requests": None,
        "max_client_batch_size": lim.max_client_batch_size,
        "auto_truncate": lim.auto_truncate,
        "tokenization_workers": 1,
        "version": VERSION,
        "sha": None,
        "docker_label": None,
        "dimension": embedder.dimension,
        "scorer": scorer.kind,
        "reranker_model_id": scorer.model_id,
        "calibration": calibration,
    }
