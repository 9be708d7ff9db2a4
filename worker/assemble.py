"""Building the answer pipeline from a worker's ``Runtime`` (the worker's composition root)."""

from __future__ import annotations

from gate import Gate
from worker.flags import FlagReader
from worker.generation.factory import chat_model_from
from worker.limits import RateLimiter
from worker.pipeline import AnswerPipeline
from worker.retrieval.factory import build_retriever
from worker.runtime import Runtime


def build_answerer(runtime: Runtime) -> AnswerPipeline:
    """The full pipeline over the runtime's pool, forum client, Redis and HTTP client.

    Model clients (embeddings, TEI, LLM) share the runtime's ``httpx.Client``; each passes its own
    per-request timeout from settings. A broken rules file or a model mismatch raises here, at start.
    """
    s = runtime.settings
    gate = Gate.load(s.gate.rules_path, timeout_ms=s.gate.timeout_ms, max_chars=s.gate.max_chars)
    retriever = build_retriever(
        s,
        connections=runtime.pool.connection,
        keyword=runtime.forum,
        http=runtime.http,
        embedder=runtime.embedder(),
    )
    return AnswerPipeline(
        s,
        pool=runtime.pool,
        forum=runtime.forum,
        flags=FlagReader(runtime.forum.get_site_settings, s.flags),
        gate=gate,
        retriever=retriever,
        chat=chat_model_from(s.llm, runtime.http),
        limiter=RateLimiter(runtime.redis, s.limits, s.redis.namespace),
    )
