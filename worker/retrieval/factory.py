"""Build a ``Retriever`` from ``Settings``: the one place that wires clients, index and term statistics.

Used by the worker, ``citebot ask`` and the eval; every part can be passed in instead (tests, benches).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from worker.calibration.store import Calibrations
from worker.clients.embeddings import build_embedder, build_excerpt_embedder
from worker.clients.tei import TeiReranker
from worker.domain import EmbedKind
from worker.errors import ConfigError
from worker.protocols import Embedder, KeywordSearch, Reranker
from worker.recheck import TopicReader
from worker.retrieval.excerpts import PostgresExcerptIndex
from worker.retrieval.keyword import PostgresTermStats, TermSelector
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import ConnectionSource, PostgresPostIndex
from worker.retrieval.retriever import Retriever
from worker.retrieval.threads import PostgresThreadIndex
from worker.settings import EmbeddingsSettings, Settings

log = logging.getLogger(__name__)


class UnavailableEmbedder:
    """Stands for a configured second bi-encoder that could not be loaded (say, its model is not
    installed): every call fails with the reason, so each answer's trace records the stage's fallback
    and the answer goes out without the feature."""

    def __init__(self, cfg: EmbeddingsSettings, reason: str) -> None:
        self.model = cfg.model
        self.dimension = cfg.dimension
        self.reason = reason

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        raise ConfigError(self.reason, service="excerpt-embeddings")


def second_embedder(settings: Settings, http: httpx.Client | None) -> Embedder | None:
    """The configured second bi-encoder (None when unset); one that cannot be loaded is logged and
    stands as an ``UnavailableEmbedder``, so that answers and refreshes go on without it."""
    cfg = settings.excerpt_embeddings
    try:
        return build_excerpt_embedder(settings, http)
    except ConfigError as exc:
        log.warning("second bi-encoder %s unavailable, running without it: %s", cfg.model, exc)
        return UnavailableEmbedder(cfg, str(exc))


def build_retriever(
    settings: Settings,
    *,
    connections: ConnectionSource,
    keyword: KeywordSearch | None,
    http: httpx.Client | None = None,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    excerpt_embedder: Embedder | None = None,
    topics: TopicReader | None = None,
    calibrated: bool = True,
) -> Retriever:
    """A retriever over the configured embedder, the post index behind ``connections`` (a pool's
    ``connection`` method, or ``single_connection(conn)``), ``keyword`` (a ``DiscourseClient``) and the
    TEI reranker when ``settings.reranker.base_url`` is set, and the second bi-encoder with its column
    when ``settings.excerpt_embeddings.model`` is set; the second stage's weights are the forum's own
    when ``citebot calibrate`` recorded some for the model set (``worker.calibration.store``; not with
    ``calibrated=False``: the eval measures the shipped weights file).
    ``topics`` (the reader's ``DiscourseClient``) lets the legacy path read each hit topic to cite its
    answer; without it the legacy path cites only the hits that are replies.

    Raises ``IndexMismatchError`` when the embedder's model or dimension is not the configured one, or
    when the index (``index_meta``) holds another model's vectors or another vector index kind: the
    index is checked here, once, so that a misconfigured process fails as it is assembled and no
    question reads ``index_meta``.
    """
    embedder = embedder or build_embedder(settings, http)
    if reranker is None and settings.reranker.base_url:
        reranker = TeiReranker(http or httpx.Client(), settings.reranker)
    index = PostgresPostIndex(
        connections,
        settings.retrieval,
        model=settings.embeddings.model,
        dimension=settings.embeddings.dimension,
    )
    index.check()
    terms = TermSelector(settings.retrieval.keyword_max_terms, stats=PostgresTermStats(connections))
    lexical = PostgresLexicalIndex(connections)
    cfg = settings.excerpt_embeddings
    excerpts = None
    if cfg.enabled:
        excerpt_embedder = excerpt_embedder or second_embedder(settings, http or httpx.Client())
        excerpts = PostgresExcerptIndex(connections, model=cfg.model, dimension=cfg.dimension)
    retriever = Retriever(
        embedder,
        index,
        keyword,
        reranker,
        settings.retrieval,
        terms=terms,
        lexical=lexical,
        threads=PostgresThreadIndex(connections),
        excerpts=excerpts,
        excerpt_embedder=excerpt_embedder,
        rerank_excerpt_chars=settings.reranker.excerpt_chars,
        topics=topics,
        bots=(settings.discourse.bot_username, settings.discourse.api_username),
        calibrations=Calibrations(connections, settings.retrieval.index_check_ttl_s) if calibrated else None,
    )
    # the path the shipped defaults take with this model set (docs/retrieval.md, "The shipped path")
    if retriever.has_stage_weights():
        log.info("%s", retriever.describe())
    else:
        log.warning("%s", retriever.describe())
    return retriever
