"""Test doubles of the model and search services (the Protocols), a helper to fill post_index, and a
counter of round trips (libpq's protocol trace).

``CannedSearch`` is a real implementation of ``KeywordSearch`` that records its calls (the embedder and
the reranker are the shipped ``worker.testing.models`` fakes); storage is never faked (the tests use
the real Postgres fixtures).
"""

from __future__ import annotations

import math
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import psycopg
from pgvector import HalfVector

from worker.domain import SearchHit
from worker.errors import CitebotError
from worker.protocols import KeywordSearch
from worker.testing.forum import FakeForum


def unit(values: Sequence[float]) -> list[float]:
    a = np.asarray(values, dtype=np.float64)
    return [float(x) for x in a / np.linalg.norm(a)]


def forum_of(*topic_ids: int, answered: bool = True) -> FakeForum:
    """Topics ``topic-<t>``: post #1 (id 10·t + 1) asks, #2 (id 10·t + 2, another member) answers when
    ``answered`` — what the legacy path reads as the reader."""
    forum = FakeForum()
    for t in topic_ids:
        forum.add_topic(t, f"Topic {t}", f"topic-{t}")
        forum.add_post(10 * t + 1, t, 1, f"question of topic {t}?", username=f"asker{t}", user_id=100 + t)
        if answered:
            forum.add_post(10 * t + 2, t, 2, f"answer of topic {t}.", username=f"helper{t}", user_id=200 + t)
    return forum


def hit(post_id: int, topic_id: int, *, post_number: int = 1, category_id: int | None = None) -> SearchHit:
    return SearchHit(
        post_id=post_id,
        topic_id=topic_id,
        post_number=post_number,
        topic_slug=f"topic-{topic_id}",
        topic_title=f"Topic {topic_id}",
        blurb=f"blurb of post {post_id}",
        category_id=category_id,
    )


class CannedSearch(KeywordSearch):
    """Discourse search with canned hits per query string (anything else finds nothing)."""

    def __init__(
        self,
        results: Mapping[str, Sequence[SearchHit]] | None = None,
        *,
        default: Sequence[SearchHit] = (),
        before: Callable[[], None] | None = None,
    ) -> None:
        self.results = dict(results or {})
        self.default = list(default)
        self.before = before
        self.queries: list[str] = []
        self.fail_with: CitebotError | None = None
        self._lock = threading.Lock()

    def search(self, query: str, *, limit: int = 25) -> list[SearchHit]:
        with self._lock:
            self.queries.append(query)
        if self.before is not None:
            self.before()
        if self.fail_with is not None:
            raise self.fail_with
        return list(self.results.get(query, self.default))[:limit]


PUBLIC_CATEGORY = 1


def describe_category(conn: psycopg.Connection, category_id: int, *, restricted: bool = False) -> None:
    """Record what the forum says of a category (``backfill.categories``): public, or restricted."""
    conn.execute(
        "INSERT INTO categories (category_id, read_restricted, seen_by) VALUES (%s, %s, 'test')"
        " ON CONFLICT (category_id) DO UPDATE SET read_restricted = EXCLUDED.read_restricted",
        (category_id, restricted),
    )


def insert_post(
    conn: psycopg.Connection,
    post_id: int,
    vector: Sequence[float],
    *,
    topic_id: int | None = None,
    post_number: int = 1,
    category_id: int | None = PUBLIC_CATEGORY,
    title: str | None = None,
    text: str | None = None,
    model: str = "test-model",
    username: str | None = None,
    reply_to: int | None = None,
) -> None:
    """One row of post_index, as the backfill writes it (title, blank line, body); its category is
    recorded as public unless the forum already described it."""
    topic = topic_id if topic_id is not None else post_id
    if category_id is not None:
        conn.execute(
            "INSERT INTO categories (category_id, read_restricted, seen_by) VALUES (%s, false, 'test')"
            " ON CONFLICT (category_id) DO NOTHING",
            (category_id,),
        )
    title = title if title is not None else f"Topic {topic}"
    body = text if text is not None else f"body of post {post_id}"
    conn.execute(
        "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title, category_id, text,"
        " digest, model, embedding, username, reply_to_post_number)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, '\\x00', %s, %s, %s, %s)",
        (
            post_id,
            topic,
            post_number,
            f"topic-{topic}",
            title,
            category_id,
            f"{title}\n\n{body}",
            model,
            HalfVector(np.asarray(unit(vector), dtype=np.float32)),
            username,
            reply_to,
        ),
    )


def angle_vector(angle_deg: float, dimension: int = 8) -> list[float]:
    """A unit vector at ``angle_deg`` from e1 in the (e1, e2) plane: cosine to e1 = cos(angle)."""
    v = [0.0] * dimension
    v[0] = math.cos(math.radians(angle_deg))
    v[1] = math.sin(math.radians(angle_deg))
    return v


def round_trips(conn: psycopg.Connection, action: Callable[[], object]) -> int:
    """How many round trips ``action`` makes on ``conn``: the server's ReadyForQuery messages in
    libpq's protocol trace (one per simple query or extended-query sync, BEGIN and COMMIT included)."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        try:
            action()
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return sum("ReadyForQuery" in line for line in trace)
