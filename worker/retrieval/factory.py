"""Build a ``Retriever`` from ``Settings``: the one place that wires clients, index and term statistics.

Used by the worker, ``citebot ask`` and the eval; every part can be passed in instead (tests, benches).
"""

from __future__ import annotations

import httpx

from worker.clients.embeddings import build_embedder
from worker.clients.tei import TeiReranker
from worker.protocols import Embedder, KeywordSearch, Reranker
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.pipeline import Retriever
from worker.retrieval.recall import ConnectionSource, PostgresPostIndex
from worker.retrieval.terms import PostgresTermStats, TermSelector
from worker.retrieval.threads import PostgresThreadIndex
from worker.settings import Settings


def build_retriever(
    settings: Settings,
    *,
    connections: ConnectionSource,
    keyword: KeywordSearch | None,
    http: httpx.Client | None = None,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
) -> Retriever:
    """A retriever over the configured embedder, the post index behind ``connections`` (a pool's
    ``connection`` method, or ``single_connection(conn)``), ``keyword`` (a ``DiscourseClient``) and the
    TEI reranker when ``settings.reranker.base_url`` is set.

    Raises ``IndexMismatchError`` when the embedder's model or dimension is not the configured one.
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
    terms = TermSelector(settings.retrieval.keyword_max_terms, stats=PostgresTermStats(connections))
    lexical = PostgresLexicalIndex(connections)
    return Retriever(
        embedder,
        index,
        keyword,
        reranker,
        settings.retrieval,
        terms=terms,
        lexical=lexical,
        threads=PostgresThreadIndex(connections),
        rerank_excerpt_chars=settings.reranker.excerpt_chars,
    )
