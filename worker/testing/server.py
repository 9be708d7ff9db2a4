"""One TEI + OpenAI-contract server with fault switches: the model services' double.

``ModelDouble.app`` serves ``/embed``, ``/rerank``, ``/info``, ``/health`` (TEI's contract) and
``/v1/chat/completions`` (OpenAI's). The end-to-end tests run it in a thread and flip its switches
directly; the soak runs it as a process (``python -m eval.soak.models``) and flips them over HTTP
(``POST /__faults`` with a JSON object of ``Knobs`` fields; ``GET /__faults`` reads them with the call
counters). Vectors come from ``FakeEmbedder`` and rerank logits from word overlap, so no model weights
are needed. The contract suites (``tests/contracts/``) hold the real clients talking to it to the same
contract as the in-memory fakes.

Switches:

- ``knobs.tei_status`` / ``knobs.llm_status``: every call answers that status (429 with
  ``Retry-After: 1``) until set back to 200; ``knobs.*_latency_ms``: each call waits first;
- ``fail_next``: statuses the LLM answers, one per call, before it succeeds again;
- ``rerank_down``: ``/rerank`` answers 503 ``Unhealthy`` (a model still loading);
- ``reasoning_model``: 400 ``unsupported_parameter`` for the deprecated ``max_tokens``, as OpenAI's
  reasoning models answer;
- ``reply``: the LLM's text; by default one that cites the first two sources, made unique per
  question (a forum refuses a post identical to a recent one).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.testing.chat import chat_completion_body, openai_unsupported_parameter
from worker.testing.models import FakeEmbedder, tei_embed_body, tei_info_body, tei_rerank_body

REPLY = "Look at how the engine handles this in the first post [[1]], and the follow-up fix [[2]]."
SETTABLE = ("llm_status", "tei_status", "llm_latency_ms", "tei_latency_ms")


@dataclass
class Knobs:
    llm_status: int = 200
    tei_status: int = 200
    llm_latency_ms: float = 0.0
    tei_latency_ms: float = 0.0
    llm_calls: int = 0
    tei_calls: int = 0
    llm_failed: int = 0
    tei_failed: int = 0
    rerank_calls: int = 0


def _failure(status: int, body: dict[str, Any]) -> JSONResponse:
    response = JSONResponse(body, status_code=status)
    if status == 429:
        response.headers["Retry-After"] = "1"
    return response


def _llm_error(status: int) -> JSONResponse:
    # vLLM / Ollama style nested error body
    return _failure(
        status, {"error": {"message": "upstream failure", "type": "server_error", "code": status}}
    )


class ModelDouble:
    """The TEI + OpenAI double; ``app`` is its ASGI app."""

    def __init__(
        self, *, model: str, dimension: int = 8, reply: str | None = None, knobs: Knobs | None = None
    ) -> None:
        self.model = model
        self.embedder = FakeEmbedder(model=model, dimension=dimension)
        self.knobs = knobs or Knobs()
        self.reply = reply
        self.fail_next: deque[int] = deque()
        self.rerank_down = False
        self.reasoning_model = False
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/embed", self._embed, methods=["POST"]),
                Route("/rerank", self._rerank, methods=["POST"]),
                Route("/info", self._info),
                Route("/health", lambda r: JSONResponse({})),
                Route("/v1/chat/completions", self._complete, methods=["POST"]),
                Route("/__faults", self._faults, methods=["GET", "POST"]),
            ]
        )

    @property
    def llm_calls(self) -> int:
        return self.knobs.llm_calls

    async def _tei_gate(self) -> JSONResponse | None:
        knobs = self.knobs
        knobs.tei_calls += 1
        if knobs.tei_latency_ms > 0:
            await asyncio.sleep(knobs.tei_latency_ms / 1000)
        if knobs.tei_status != 200:
            knobs.tei_failed += 1
            return _failure(knobs.tei_status, {"error": "model is overloaded", "error_type": "Overloaded"})
        return None

    async def _embed(self, request: Request) -> Response:
        failed = await self._tei_gate()
        if failed is not None:
            return failed
        status, payload = tei_embed_body(self.embedder, await request.json())
        return JSONResponse(payload, status_code=status)

    async def _rerank(self, request: Request) -> Response:
        self.knobs.rerank_calls += 1
        failed = await self._tei_gate()
        if failed is not None:
            return failed
        if self.rerank_down:
            return JSONResponse({"error": "model is not ready", "error_type": "Unhealthy"}, status_code=503)
        return JSONResponse(tei_rerank_body(await request.json()))

    async def _info(self, request: Request) -> Response:
        return JSONResponse(tei_info_body(self.model))

    async def _complete(self, request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        knobs = self.knobs
        with self._lock:
            knobs.llm_calls += 1
            calls = knobs.llm_calls
            self.bodies.append(body)
            status = self.fail_next.popleft() if self.fail_next else knobs.llm_status
        if knobs.llm_latency_ms > 0:
            await asyncio.sleep(knobs.llm_latency_ms / 1000)
        if self.reasoning_model and "max_tokens" in body:
            return JSONResponse(openai_unsupported_parameter("max_tokens", "max_completion_tokens"), 400)
        if status != 200:
            knobs.llm_failed += 1
            return _llm_error(status)
        if self.reply is not None:
            text = self.reply
        else:
            messages = body.get("messages") or [{}]
            ref = hashlib.sha256(str(messages[-1].get("content", "")).encode("utf-8")).hexdigest()[:10]
            text = f"{REPLY} (ref {ref})"
        return JSONResponse(
            chat_completion_body(body.get("model", self.model), text, completion_id=f"chatcmpl-{calls}")
        )

    async def _faults(self, request: Request) -> Response:
        if request.method == "POST":
            values = await request.json()
            for key, value in values.items():
                if key not in SETTABLE:
                    return JSONResponse({"error": f"unknown knob {key!r}"}, status_code=400)
                setattr(self.knobs, key, type(getattr(self.knobs, key))(value))
        return JSONResponse(asdict(self.knobs))
