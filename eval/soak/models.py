"""TEI- and OpenAI-contract servers for the soak, in their own process, with fault knobs.

``python -m eval.soak.models --port P [--llm-latency-ms X]`` serves ``/embed``, ``/rerank``, ``/info``,
``/health`` (TEI) and ``/v1/chat/completions`` (OpenAI). ``POST /__faults`` with a JSON object sets
``llm_status`` / ``tei_status`` (200: healthy; 429 answers with ``Retry-After: 1``) and
``llm_latency_ms`` / ``tei_latency_ms``; ``GET /__faults`` reads them with the call counters. Vectors
come from ``FakeEmbedder`` (8-d) and rerank logits from word overlap, so no model weights are needed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.testing.chat import chat_completion_body
from worker.testing.models import FakeEmbedder, tei_embed_body, tei_info_body, tei_rerank_body

MODEL = "soak-model"
DIMENSION = 8
EMBEDDER = FakeEmbedder(model=MODEL, dimension=DIMENSION)
# What the fake LLM answers: cites the first two sources, so the sanitizer turns them into links.
REPLY = "Look at how the engine handles this in the first post [[1]], and the follow-up fix [[2]]."


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


def _failure(status: int, body: dict[str, Any]) -> JSONResponse:
    response = JSONResponse(body, status_code=status)
    if status == 429:
        response.headers["Retry-After"] = "1"
    return response


def create_app(knobs: Knobs) -> Starlette:
    async def tei_gate() -> JSONResponse | None:
        knobs.tei_calls += 1
        if knobs.tei_latency_ms > 0:
            await asyncio.sleep(knobs.tei_latency_ms / 1000)
        if knobs.tei_status != 200:
            knobs.tei_failed += 1
            return _failure(knobs.tei_status, {"error": "model is overloaded", "error_type": "Overloaded"})
        return None

    async def embed(request: Request) -> Response:
        failed = await tei_gate()
        if failed is not None:
            return failed
        status, payload = tei_embed_body(EMBEDDER, await request.json())
        return JSONResponse(payload, status_code=status)

    async def rerank(request: Request) -> Response:
        failed = await tei_gate()
        if failed is not None:
            return failed
        return JSONResponse(tei_rerank_body(await request.json()))

    async def info(request: Request) -> Response:
        return JSONResponse(tei_info_body(MODEL))

    async def complete(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        knobs.llm_calls += 1
        if knobs.llm_latency_ms > 0:
            await asyncio.sleep(knobs.llm_latency_ms / 1000)
        if knobs.llm_status != 200:
            knobs.llm_failed += 1
            return _failure(
                knobs.llm_status,
                {"error": {"message": "upstream failure", "type": "server_error", "code": knobs.llm_status}},
            )
        # One reply per question: the forum (like Discourse) refuses a post identical to a recent one.
        messages = body.get("messages") or [{}]
        ref = hashlib.sha256(str(messages[-1].get("content", "")).encode("utf-8")).hexdigest()[:10]
        return JSONResponse(
            chat_completion_body(
                body.get("model", MODEL), f"{REPLY} (ref {ref})", completion_id=f"chatcmpl-{knobs.llm_calls}"
            )
        )

    async def faults(request: Request) -> Response:
        if request.method == "POST":
            values = await request.json()
            for key, value in values.items():
                if key not in ("llm_status", "tei_status", "llm_latency_ms", "tei_latency_ms"):
                    return JSONResponse({"error": f"unknown knob {key!r}"}, status_code=400)
                setattr(knobs, key, type(getattr(knobs, key))(value))
        return JSONResponse(asdict(knobs))

    return Starlette(
        routes=[
            Route("/embed", embed, methods=["POST"]),
            Route("/rerank", rerank, methods=["POST"]),
            Route("/info", info),
            Route("/health", lambda r: JSONResponse({})),
            Route("/v1/chat/completions", complete, methods=["POST"]),
            Route("/__faults", faults, methods=["GET", "POST"]),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m eval.soak.models")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm-latency-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    app = create_app(Knobs(llm_latency_ms=args.llm_latency_ms))
    uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False, log_config=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
