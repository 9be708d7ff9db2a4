"""Post-grain recall: cosine nearest neighbours over ``post_index`` with pgvector's HNSW index.

Two index kinds (``CITEBOT_RETRIEVAL__VECTOR_INDEX``, see ``worker.db.vector_index``): ``halfvec``,
described below, and ``binary``, whose Hamming scan over ``binary_quantize(embedding)`` yields
``binary_candidates`` posts that the exact halfvec cosine re-ranks (``BINARY_RECALL_SQL``). Both apply
the same eligibility filter inside the index scan, with the same iterative scan.

The query is ``ORDER BY embedding <=> $1 LIMIT k`` with exactly the index's expression
(``halfvec_cosine_ops``), the vector passed as a ``HalfVector``. Eligibility is re-checked at query
time, fail closed, by the one condition of ``worker.retrieval.eligibility``: a post is eligible only
while its category is in ``citable_categories``, so a category made private, or never described, is
excluded even if its posts were indexed before. The filter is applied after the
index scan, so pgvector 0.8's iterative scan keeps scanning until ``k`` rows pass it (``relaxed_order``,
then re-sorted by distance outside a materialized CTE, as pgvector's documentation recommends).

Each read is one statement on the wire. A recall on an idle connection runs in autocommit (a single
SELECT is its own transaction, with the same snapshot as inside BEGIN … COMMIT), so no ``BEGIN`` and
``COMMIT`` round trips surround it. Its search knobs (``hnsw.ef_search``, ``hnsw.iterative_scan``,
``hnsw.max_scan_tuples``) are session settings of the connection, set once when they differ from what
that connection last got (``_SESSION_KNOBS``, per connection object: a replaced pooled connection starts
without) rather than before every query. They are read at execution time, so they are not frozen into
psycopg's prepared plans, and only the recall queries scan an HNSW index. A connection the caller holds
inside a transaction gets the knobs with ``is_local => true`` in a savepoint, as before, leaving its
session untouched.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg.pq import TransactionStatus

from worker.db.boundary import database_errors
from worker.db.meta import check_index_meta
from worker.db.vector_index import HNSW_WITH, INDEX_NAMES, hnsw_options, read_graph, read_memory
from worker.domain import Candidate
from worker.errors import IndexMismatchError
from worker.retrieval.eligibility import CITABLE_CATEGORIES_SQL, ELIGIBLE
from worker.settings import RetrievalSettings

log = logging.getLogger(__name__)

ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection]]

# Eligible now: ``ELIGIBLE`` (worker.retrieval.eligibility), a plain filter on the HNSW index scan.
RECALL_SQL = f"""
WITH nearest AS MATERIALIZED (
    SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id,
           p.embedding <=> %(q)s AS distance
    FROM post_index p
    WHERE {ELIGIBLE}
      AND p.post_id <> ALL(%(exclude)s::bigint[])
    ORDER BY p.embedding <=> %(q)s
    LIMIT %(k)s
)
SELECT * FROM nearest ORDER BY distance + 0, post_id
"""  # noqa: S608 - constants only

# The binary-quantized kind (worker.db.vector_index): the HNSW index over binary_quantize(embedding)
# gives the ``n`` eligible posts nearest by Hamming distance (the same filters, so the iterative scan
# fills ``n`` as above), and those are re-ranked by the exact cosine of their halfvec column. The
# cast's typmod is the index's dimension, a literal the planner must see to match the index
# expression; it is the one value formatted in (an int, from the settings).
BINARY_RECALL_SQL = f"""
WITH candidates AS MATERIALIZED (
    SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id,
           p.embedding <=> %(q)s AS distance
    FROM post_index p
    WHERE {ELIGIBLE}
      AND p.post_id <> ALL(%(exclude)s::bigint[])
    ORDER BY binary_quantize(p.embedding)::bit({{dimension}}) <~> binary_quantize(%(q)s)
    LIMIT %(n)s
)
SELECT * FROM candidates ORDER BY distance, post_id LIMIT %(k)s
"""  # noqa: S608 - constants only

POSTS_SQL = f"""
SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id
FROM post_index p
WHERE p.post_id = ANY(%s::bigint[])
  AND {ELIGIBLE}
"""  # noqa: S608 - constants only

# Topics with at least one post the index holds as citable now: the legacy path's hits (Discourse
# search, topic grain) are kept only where the index agrees that the topic is public.
CITABLE_TOPICS_SQL = f"""
SELECT DISTINCT p.topic_id
FROM post_index p
WHERE p.topic_id = ANY(%s::bigint[])
  AND {ELIGIBLE}
"""  # noqa: S608 - constants only

NEIGHBOURS_SQL = f"""
SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id
FROM post_index p
WHERE p.topic_id = %s AND p.post_number BETWEEN %s AND %s AND p.post_number <> %s
  AND {ELIGIBLE}
ORDER BY p.post_number
"""  # noqa: S608 - constants only

COSINES_SQL = """
SELECT p.post_id, 1 - (p.embedding <=> %(q)s) FROM post_index p WHERE p.post_id = ANY(%(ids)s::bigint[])
"""

HNSW_MAX_EF_SEARCH = 1000  # pgvector refuses a larger hnsw.ef_search
# The ef_search an older halfvec graph (m = 16, ef_construction = 64, before issue 18's fourth session)
# needs for the default's recall: 200 gave recall@25 0.97 on it at 425k, the default 40 only 0.79.
OLDER_GRAPH_EF_SEARCH = 200
Knobs = tuple[str, str, str]  # hnsw.ef_search, hnsw.iterative_scan, hnsw.max_scan_tuples
_SETTINGS_SQL = (
    "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', %s, true),"
    " set_config('hnsw.max_scan_tuples', %s, true)"
)
_SESSION_SETTINGS_SQL = _SETTINGS_SQL.replace("true)", "false)")
# The knobs each connection's session last got from _SESSION_SETTINGS_SQL (weak: a closed connection
# drops out). One registry for every PostgresPostIndex, so indexes with different knobs can share a pool.
_SESSION_KNOBS: weakref.WeakKeyDictionary[psycopg.Connection, Knobs] = weakref.WeakKeyDictionary()
_SESSION_KNOBS_LOCK = threading.Lock()


class PostIndex(Protocol):
    """What the retriever needs from the post index (``PostgresPostIndex``, or a test double)."""

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def recall(
        self, vector: Sequence[float], k: int, exclude_post_ids: Sequence[int] = ()
    ) -> list[Candidate]:
        """The ``k`` eligible posts nearest to ``vector``, nearest first (``cosine``, ``vector_rank`` set)."""
        ...

    def is_empty(self) -> bool: ...

    def cosines(self, vector: Sequence[float], post_ids: Sequence[int]) -> dict[int, float]:
        """The cosine of ``vector`` to each indexed post of ``post_ids`` (hits of the other channels)."""
        ...

    def posts(self, post_ids: Sequence[int]) -> dict[int, Candidate]:
        """The eligible indexed posts among ``post_ids`` (to give keyword hits their full text)."""
        ...

    def citable_topics(self, topic_ids: Sequence[int]) -> frozenset[int]:
        """The topics among ``topic_ids`` with at least one eligible indexed post (legacy hits)."""
        ...

    def citable_categories(self) -> frozenset[int]:
        """The categories recall reads now (every other category is excluded)."""
        ...

    def neighbours(self, topic_id: int, post_number: int, n: int) -> list[Candidate]:
        """Eligible posts of the topic within ``n`` post numbers of ``post_number`` (itself excluded)."""
        ...


def single_connection(conn: psycopg.Connection) -> ConnectionSource:
    """A connection source over one connection, serialised by a lock (CLI, tests, benches)."""
    lock = threading.Lock()

    @contextmanager
    def borrow() -> Iterator[psycopg.Connection]:
        with lock:
            yield conn

    return borrow


class PostgresPostIndex:
    """``post_index`` in PostgreSQL + pgvector, read through a connection source (a pool's ``connection``)."""

    def __init__(
        self, connections: ConnectionSource, settings: RetrievalSettings, *, model: str, dimension: int
    ) -> None:
        self._connections = connections
        self._settings = settings
        self._model = model
        self._dimension = dimension
        self._recall_sql = recall_sql(settings.vector_index, dimension)

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @contextmanager
    def _statement(self, knobs: Knobs | None = None) -> Iterator[psycopg.Connection]:
        """A connection for one read statement, with the search ``knobs`` in effect (module docstring):
        in autocommit when the connection is idle, else inside the caller's transaction (a savepoint).
        Connection-level failures become ServiceUnavailableError (``worker.db.boundary``)."""
        with database_errors("post index unavailable"), self._connections() as conn:
            if conn.info.transaction_status != TransactionStatus.IDLE:
                with conn.transaction():
                    if knobs is not None:
                        conn.execute(_SETTINGS_SQL, knobs)
                    yield conn
                return
            with _autocommit(conn):
                if knobs is not None:
                    _session_knobs(conn, knobs)
                yield conn

    def check(self) -> None:
        """Compare the index's model, dimension and vector index kind with ours; raise IndexMismatchError.
        Warn about a graph built with other parameters and about memory settings that slow recall
        (``IndexMemory.advice``).

        Run once, when the retriever is built (``worker.retrieval.factory.build_retriever``, at the
        composition root): a misconfigured process fails at its start, and no question reads
        ``index_meta``."""
        with self._statement() as conn:
            meta = check_index_meta(conn, self._model, self._dimension)
            graph = read_graph(conn, self._settings.vector_index)
            memory = read_memory(conn, self._settings.vector_index)
        for advice in memory.advice():
            log.warning("%s (docs/operations.md, 'Sizing the index')", advice)
        if meta.vector_index != self._settings.vector_index:
            raise IndexMismatchError(
                f"the post index carries a {meta.vector_index} vector index (index_meta), but "
                f"CITEBOT_RETRIEVAL__VECTOR_INDEX is {self._settings.vector_index}: run `citebot db "
                "migrate` to build that one, or set the variable back",
                service="postgres",
            )
        kind = self._settings.vector_index
        if graph is not None and graph != hnsw_options(kind):
            older = kind == "halfvec" and "ef_search" not in self._settings.model_fields_set
            if older:
                self._settings = self._settings.model_copy(update={"ef_search": OLDER_GRAPH_EF_SEARCH})
            log.warning(
                "%s was built with %s, not today's %s: %s; rebuild it (docs/operations.md, "
                "'Sizing the index')",
                INDEX_NAMES[kind],
                graph,
                HNSW_WITH[kind],
                f"ef_search {OLDER_GRAPH_EF_SEARCH} for it, the default's recall needs the new graph"
                if older
                else "recall may be lower than the benchmarks' at these settings",
            )

    def recall(
        self, vector: Sequence[float], k: int, exclude_post_ids: Sequence[int] = ()
    ) -> list[Candidate]:
        if len(vector) != self._dimension:
            raise IndexMismatchError(
                f"query vector has {len(vector)} dimensions, CITEBOT_EMBEDDINGS__DIMENSION {self._dimension}",
                service="postgres",
            )
        knobs, params = recall_params(self._settings, vector, k, exclude_post_ids)
        with self._statement(knobs) as conn:
            rows = conn.execute(self._recall_sql, params).fetchall()
        return [
            row_candidate(r, cosine=1.0 - float(r[7]), vector_rank=rank)
            for rank, r in enumerate(rows, start=1)
        ]

    def cosines(self, vector: Sequence[float], post_ids: Sequence[int]) -> dict[int, float]:
        if not post_ids:
            return {}
        if len(vector) != self._dimension:
            raise IndexMismatchError(
                f"query vector has {len(vector)} dimensions, the index {self._dimension}", service="postgres"
            )
        params = {"q": HalfVector(np.asarray(vector, dtype=np.float32)), "ids": list(post_ids)}
        with self._statement() as conn:
            rows = conn.execute(COSINES_SQL, params).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    def is_empty(self) -> bool:
        with self._statement() as conn:
            row = conn.execute("SELECT NOT EXISTS (SELECT 1 FROM post_index)").fetchone()
        return bool(row and row[0])

    def posts(self, post_ids: Sequence[int]) -> dict[int, Candidate]:
        if not post_ids:
            return {}
        with self._statement() as conn:
            rows = conn.execute(POSTS_SQL, (list(post_ids),)).fetchall()
        return {int(r[0]): _candidate(r) for r in rows}

    def citable_topics(self, topic_ids: Sequence[int]) -> frozenset[int]:
        if not topic_ids:
            return frozenset()
        with self._statement() as conn:
            rows = conn.execute(CITABLE_TOPICS_SQL, (list(topic_ids),)).fetchall()
        return frozenset(int(r[0]) for r in rows)

    def citable_categories(self) -> frozenset[int]:
        with self._statement() as conn:
            rows = conn.execute(CITABLE_CATEGORIES_SQL).fetchall()
        return frozenset(int(r[0]) for r in rows)

    def neighbours(self, topic_id: int, post_number: int, n: int) -> list[Candidate]:
        if n <= 0:
            return []
        span = (topic_id, post_number - n, post_number + n, post_number)
        with self._statement() as conn:
            rows = conn.execute(NEIGHBOURS_SQL, span).fetchall()
        return [_candidate(r) for r in rows]


@contextmanager
def _autocommit(conn: psycopg.Connection) -> Iterator[None]:
    """``conn`` (idle) in autocommit for the block, then as it was: psycopg switches on the client side,
    with no round trip (psycopg_pool's own connection check does the same)."""
    if conn.autocommit:
        yield
        return
    conn.autocommit = True
    try:
        yield
    finally:
        if not conn.closed:
            conn.autocommit = False


def _session_knobs(conn: psycopg.Connection, knobs: Knobs) -> None:
    """Make ``knobs`` the session's search settings of ``conn`` (idle, in autocommit: committed at once),
    with a round trip only when they differ from what it last got."""
    with _SESSION_KNOBS_LOCK:
        current = _SESSION_KNOBS.get(conn)
    if current == knobs:
        return
    conn.execute(_SESSION_SETTINGS_SQL, knobs)
    with _SESSION_KNOBS_LOCK:
        _SESSION_KNOBS[conn] = knobs


def recall_sql(kind: str, dimension: int) -> str:
    """The recall query for the vector index ``kind`` over ``dimension``-d vectors."""
    if kind == "binary":
        return BINARY_RECALL_SQL.replace("{dimension}", str(int(dimension)))
    return RECALL_SQL


def recall_params(
    settings: RetrievalSettings, vector: Sequence[float], k: int, exclude_post_ids: Sequence[int] = ()
) -> tuple[Knobs, dict[str, object]]:
    """The search knobs (for ``_SETTINGS_SQL``) and the query parameters of one recall.

    The binary kind's candidate scan must yield ``n`` rows: its ``hnsw.ef_search`` is
    ``binary_ef_search``, or ``n`` when that is 0, at most pgvector's 1,000 (past it the iterative
    scan yields the rest).
    """
    n = max(k, settings.binary_candidates)
    if settings.vector_index == "binary":
        ef = min(HNSW_MAX_EF_SEARCH, settings.binary_ef_search or n)
    else:
        ef = settings.ef_search
    knobs = (str(ef), settings.iterative_scan, str(settings.max_scan_tuples))
    query = HalfVector(np.asarray(vector, dtype=np.float32))
    return knobs, {"q": query, "k": k, "n": n, "exclude": list(exclude_post_ids)}


def _candidate(r: Sequence[object]) -> Candidate:
    return Candidate(
        post_id=int(r[0]),  # type: ignore[call-overload]
        topic_id=int(r[1]),  # type: ignore[call-overload]
        post_number=int(r[2]),  # type: ignore[call-overload]
        topic_slug=str(r[3]),
        topic_title=str(r[4]),
        text=str(r[5]),
        category_id=None if r[6] is None else int(r[6]),  # type: ignore[call-overload]
    )


def row_candidate(r: Sequence[Any], **scores: Any) -> Candidate:
    """A ``Candidate`` from the columns every post-index query selects first (post id, topic id, post
    number, slug, title, text, category), with the scores of the channel that found it."""
    return Candidate(
        post_id=int(r[0]),
        topic_id=int(r[1]),
        post_number=int(r[2]),
        topic_slug=str(r[3]),
        topic_title=str(r[4]),
        text=str(r[5]),
        category_id=None if r[6] is None else int(r[6]),
        **scores,
    )
