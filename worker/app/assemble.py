"""The worker's composition root: everything long-lived is built here, once per process.

``build_runtime`` opens the pool, the HTTP, forum and Redis clients and names the one embedder and the
indexer (both built on first use); ``lazy_runtime`` defers it to the first message; ``build_answerer``
builds the answer pipeline over them. Every other module receives these as typed objects. The indexer
is ``backfill``'s (``backfill.indexer.BackfillIndexer``): the applications (``worker.app``) sit above
``backfill`` and import it; the core of ``worker`` knows only the ``worker.protocols.Indexer`` it
satisfies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import httpx
import redis as redis_lib

from backfill.indexer import BackfillIndexer
from gate import Gate, IntentError, IntentLayer
from worker.budget import build_budget
from worker.clients.discourse import DiscourseClient
from worker.clients.embeddings import build_embedder
from worker.db.connect import open_pool
from worker.flags import FlagReader
from worker.generation.factory import chat_model_from
from worker.limits import RateLimiter
from worker.pipeline import AnswerPipeline
from worker.protocols import Indexer
from worker.recheck import SourceCheck
from worker.retrieval.factory import build_retriever, second_embedder
from worker.runtime import Answerer, Once, Runtime
from worker.settings import Settings

log = logging.getLogger(__name__)


AnswererFactory = Callable[[Runtime], Answerer]


IndexerFactory = Callable[[Runtime], Indexer]


def build_runtime(
    settings: Settings,
    answerer_factory: AnswererFactory | None = None,
    indexer_factory: IndexerFactory = BackfillIndexer,
) -> Runtime:
    """Open the pool and clients described by ``settings``; the embedder and the indexer are built
    on first use, the answerer (when a factory is given) now."""
    pool = open_pool(settings.database)
    http = httpx.Client(timeout=settings.discourse.timeout_s)
    redis = redis_lib.Redis.from_url(settings.redis.url)
    budget = build_budget(settings.discourse, redis, settings.redis.namespace)
    forum = DiscourseClient(http, settings.discourse, budget=budget, priority="answer")
    # ``runtime`` is read when the indexer is first built: the finished runtime, answerer included.
    runtime = Runtime(
        settings,
        pool,
        http,
        forum,
        redis,
        Once(lambda: build_embedder(settings, http)),
        Once(lambda: indexer_factory(runtime)),
        excerpt_embedder=Once(lambda: second_embedder(settings, http)),
    )
    if answerer_factory is not None:
        runtime = replace(runtime, answerer=answerer_factory(runtime))
    return runtime


def lazy_runtime(settings: Settings, answerer_factory: AnswererFactory | None = None) -> Once[Runtime]:
    """The process's ``Runtime``, built on the first call (thread-safe) and the same one afterwards: what
    ``declare_actors`` is handed, so declaring actors reads no environment and opens nothing."""
    return Once(lambda: build_runtime(settings, answerer_factory))


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
    gate = Gate.load(
        s.gate.rules_path, timeout_ms=s.gate.timeout_ms, max_chars=s.gate.max_chars, lexical=s.gate.lexical
    )
    retriever = build_retriever(
        s,
        connections=runtime.pool.connection,
        keyword=runtime.forum.reader(),
        http=runtime.http,
        embedder=runtime.embedder(),
        excerpt_embedder=runtime.excerpt_embedder(),
        topics=runtime.forum.reader(),
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
        recheck=SourceCheck(retriever.index, runtime.forum.reader()),
    )
