"""Local servers speaking the exact contracts of TEI and an OpenAI-compatible LLM, with fault knobs.

They serve the end-to-end tests: the worker talks to them over HTTP exactly as to the real services.
Vectors come from ``FakeEmbedder`` (8-d, deterministic) and rerank logits from word overlap, so the
tests need no model weights.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from worker.testing.chat import chat_completion_body, openai_unsupported_parameter
from worker.testing.models import FakeEmbedder, tei_embed_body, tei_info_body, tei_rerank_body

EMBEDDER = FakeEmbedder(model="test-model", dimension=8)


class FakeTei:
    """``/embed``, ``/rerank`` (raw logits or sigmoid), ``/health``, ``/info``; ``rerank_down`` → 503."""

    def __init__(self) -> None:
        self.rerank_down = False
        self.rerank_calls = 0
        self.app = Starlette(
            routes=[
                Route("/embed", self.embed, methods=["POST"]),
                Route("/rerank", self.rerank, methods=["POST"]),
                Route("/health", lambda r: JSONResponse({})),
                Route("/info", self.info),
            ]
        )

    async def embed(self, request: Request) -> JSONResponse:
        status, payload = tei_embed_body(EMBEDDER, await request.json())
        return JSONResponse(payload, status_code=status)

    async def rerank(self, request: Request) -> JSONResponse:
        self.rerank_calls += 1
        if self.rerank_down:
            return JSONResponse({"error": "model is not ready", "error_type": "Unhealthy"}, status_code=503)
        return JSONResponse(tei_rerank_body(await request.json()))

    async def info(self, request: Request) -> JSONResponse:
        return JSONResponse(tei_info_body("fake"))


class FakeLlm:
    """``POST /v1/chat/completions`` with OpenAI's response schema; ``fail_next`` holds HTTP statuses to
    answer before succeeding. ``reasoning_model`` answers like OpenAI's reasoning models: 400
    ``unsupported_parameter`` when the request carries the deprecated ``max_tokens``."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.fail_next: deque[int] = deque()
        self.reasoning_model = False
        self.calls = 0
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.complete, methods=["POST"])])

    async def complete(self, request: Request) -> JSONResponse:
        body: dict[str, Any] = await request.json()
        with self.lock:
            self.calls += 1
            self.bodies.append(body)
            status = self.fail_next.popleft() if self.fail_next else 200
        if self.reasoning_model and "max_tokens" in body:
            return JSONResponse(openai_unsupported_parameter("max_tokens", "max_completion_tokens"), 400)
        if status != 200:
            # vLLM / Ollama style nested error body
            return JSONResponse(
                {"error": {"message": "upstream failure", "type": "server_error", "code": status}},
                status_code=status,
            )
        return JSONResponse(chat_completion_body(body.get("model", "fake"), self.reply))
