"""Building the answer pipeline from a worker's ``Runtime`` (the worker's composition root)."""

from __future__ import annotations

import logging

from gate import Gate, IntentError, IntentLayer
from worker.flags import FlagReader
from worker.generation.factory import chat_model_from
from worker.limits import RateLimiter
from worker.pipeline import AnswerPipeline
from worker.retrieval.factory import build_retriever
from worker.runtime import Runtime
from worker.settings import Settings

log = logging.getLogger(__name__)


def load_intent_layer(s: Settings, gate: Gate) -> IntentLayer | None:
    """The gate's embedding layer for the configured embedding model, or None when there are no
    exemplars for it (logged; the flag then does nothing). An explicit ``gate.intent_path`` that is
    broken, or categories without a canned reply, raise: a misconfiguration stops the start."""
    try:
        layer = IntentLayer.load(s.gate.intent_path, model=s.embeddings.model)
    except IntentError as exc:
        if s.gate.intent_path is not None:
            raise
        log.warning("gate embedding layer unavailable: %s", exc)
        return None
    if layer.model != s.embeddings.model or layer.dimension != s.embeddings.dimension:
        raise IntentError(
            f"{layer.source}: exemplars of {layer.model} ({layer.dimension}-d), "
            f"but questions are embedded with {s.embeddings.model} ({s.embeddings.dimension}-d)"
        )
    missing = set(layer.categories) - set(gate.rules.replies)
    if missing:
        raise IntentError(f"{layer.source}: categories without a canned reply: {sorted(missing)}")
    return layer


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
        intent=load_intent_layer(s, gate),
    )
