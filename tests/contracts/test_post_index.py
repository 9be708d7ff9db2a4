"""The ``PostIndex`` contract: the in-memory ``FakePostIndex`` and ``PostgresPostIndex`` over real
PostgreSQL + pgvector, filled with the same posts and categories, answer alike.

The ``postgres`` case is in the integration tier (``make test``); the ``fake`` case runs in the fast tier
(``make test-fast``), so tests of the retrieval logic can use the fake knowing it behaves as the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.errors import IndexMismatchError
from worker.retrieval.recall import PostgresPostIndex, PostIndex, single_connection
from worker.settings import RetrievalSettings
from worker.testing.post_index import FakePostIndex


class Writer(Protocol):
    """What a test writes: the backfill's posts and the category sync's descriptions."""

    def add_post(
        self,
        post_id: int,
        vector: Sequence[float],
        *,
        topic_id: int | None = None,
        post_number: int = 1,
        category_id: int | None = 1,
    ) -> None: ...

    def describe_category(
        self, category_id: int, *, restricted: bool | None = False, parent_category_id: int | None = None
    ) -> None: ...


class PostgresWriter:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def add_post(
        self,
        post_id: int,
        vector: Sequence[float],
        *,
        topic_id: int | None = None,
        post_number: int = 1,
        category_id: int | None = 1,
    ) -> None:
        insert_post(
            self.conn, post_id, vector, topic_id=topic_id, post_number=post_number, category_id=category_id
        )

    def describe_category(
        self, category_id: int, *, restricted: bool | None = False, parent_category_id: int | None = None
    ) -> None:
        self.conn.execute(
            "INSERT INTO categories (category_id, read_restricted, parent_category_id, seen_by)"
            " VALUES (%s, %s, %s, 'test') ON CONFLICT (category_id) DO UPDATE SET"
            " read_restricted = EXCLUDED.read_restricted, parent_category_id = EXCLUDED.parent_category_id",
            (category_id, restricted, parent_category_id),
        )


@pytest.fixture(params=["fake", pytest.param("postgres", marks=pytest.mark.integration)])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[PostIndex, Writer]]:
    if request.param == "fake":
        fake = FakePostIndex(model="test-model", dimension=8)
        yield fake, fake
        return
    db_url: str = request.getfixturevalue("db_url")
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        index = PostgresPostIndex(
            single_connection(conn), RetrievalSettings(), model="test-model", dimension=8
        )
        yield index, PostgresWriter(conn)


def test_the_model_and_dimension_are_the_ones_given(pair: tuple[PostIndex, Writer]) -> None:
    index, _ = pair
    assert (index.model, index.dimension) == ("test-model", 8)


def test_recall_orders_by_cosine_ranks_from_one_and_stops_at_k(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    for post_id, angle in [(1, 40), (2, 5), (3, 90), (4, 20), (5, 170)]:
        w.add_post(post_id, angle_vector(angle))
    got = index.recall(angle_vector(0), 4)
    assert [c.post_id for c in got] == [2, 4, 1, 3]
    assert [c.vector_rank for c in got] == [1, 2, 3, 4]
    assert got[0].cosine == pytest.approx(np.cos(np.radians(5)), abs=2e-3)
    assert got[3].cosine == pytest.approx(0.0, abs=2e-3)
    assert (got[0].topic_id, got[0].topic_slug, got[0].topic_title) == (2, "topic-2", "Topic 2")
    assert got[0].text == "Topic 2\n\nbody of post 2"
    assert got[0].category_id == 1


def test_recall_leaves_out_excluded_posts(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    for post_id in (1, 2, 3, 4):
        w.add_post(post_id, angle_vector(post_id * 10))
    got = index.recall(angle_vector(0), 3, exclude_post_ids=[1, 3])
    assert [c.post_id for c in got] == [2, 4]


def test_a_restricted_category_vanishes_at_once_and_comes_back(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    w.add_post(1, angle_vector(1), category_id=5)
    w.add_post(2, angle_vector(2), category_id=6)
    w.add_post(3, angle_vector(3), category_id=7)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [1, 2, 3]
    w.describe_category(5, restricted=True)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [2, 3]
    assert index.posts([1, 2]).keys() == {2}
    assert index.citable_categories() == frozenset({6, 7})
    assert index.citable_topics([1, 2, 3]) == frozenset({2, 3})
    w.describe_category(5)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [1, 2, 3]


def test_only_categories_described_public_with_public_ancestors_are_read(
    pair: tuple[PostIndex, Writer],
) -> None:
    """Fail closed: no category, a category with an unknown parent, a child of a restricted category, a
    grandchild of a restricted one, permissions unknown; a three-level public chain is read."""
    index, w = pair
    w.describe_category(20, restricted=True)
    w.describe_category(21, parent_category_id=20)  # child of restricted
    w.describe_category(22, parent_category_id=21)  # grandchild of restricted
    w.describe_category(30)
    w.describe_category(31, parent_category_id=30)
    w.describe_category(32, parent_category_id=31)  # public chain
    w.describe_category(40, parent_category_id=999)  # parent never described
    w.describe_category(50, restricted=None)  # permissions unknown
    w.add_post(1, angle_vector(1), category_id=None)
    w.add_post(2, angle_vector(2), category_id=21)
    w.add_post(3, angle_vector(3), category_id=22)
    w.add_post(4, angle_vector(4), category_id=32)
    w.add_post(5, angle_vector(5), category_id=40)
    w.add_post(6, angle_vector(6), category_id=50)
    w.add_post(7, angle_vector(7), category_id=31)
    assert [c.post_id for c in index.recall(angle_vector(0), 10)] == [4, 7]
    assert index.citable_categories() == frozenset({30, 31, 32})
    assert index.posts(list(range(1, 8))).keys() == {4, 7}
    assert index.citable_topics(list(range(1, 8))) == frozenset({4, 7})


def test_cosines_read_every_indexed_post_and_posts_only_eligible_ones(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    w.add_post(1, angle_vector(0))
    w.add_post(2, angle_vector(60), category_id=9)
    w.describe_category(9, restricted=True)
    got = index.cosines(angle_vector(0), [1, 2, 404])
    assert got.keys() == {1, 2}
    assert got[1] == pytest.approx(1.0, abs=2e-3)
    assert got[2] == pytest.approx(0.5, abs=2e-3)
    assert index.cosines(angle_vector(0), []) == {}
    assert index.posts([]) == {}
    assert index.citable_topics([]) == frozenset()
    post = index.posts([1, 404])[1]
    assert (post.post_id, post.topic_id, post.cosine, post.vector_rank) == (1, 1, None, None)


def test_a_vector_of_another_dimension_is_a_mismatch(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    w.add_post(1, angle_vector(0))
    with pytest.raises(IndexMismatchError):
        index.recall([1.0, 0.0, 0.0], 3)
    with pytest.raises(IndexMismatchError):
        index.cosines([1.0, 0.0, 0.0], [1])
    assert index.cosines([1.0, 0.0, 0.0], []) == {}  # nothing asked, nothing checked


def test_is_empty_and_neighbours(pair: tuple[PostIndex, Writer]) -> None:
    index, w = pair
    assert index.is_empty()
    assert index.recall(angle_vector(0), 5) == []
    for n in range(1, 6):
        w.add_post(900 + n, angle_vector(n), topic_id=9, post_number=n)
    w.add_post(999, angle_vector(9), topic_id=8, post_number=4)  # another topic
    w.add_post(906, angle_vector(9), topic_id=9, post_number=6, category_id=7)
    w.describe_category(7, restricted=True)  # a restricted post of the topic is no neighbour
    assert not index.is_empty()
    assert [c.post_number for c in index.neighbours(9, 3, 1)] == [2, 4]
    assert [c.post_number for c in index.neighbours(9, 1, 2)] == [2, 3]
    assert [c.post_number for c in index.neighbours(9, 5, 3)] == [2, 3, 4]
    assert index.neighbours(9, 3, 0) == []
    assert index.neighbours(9, 3, -1) == []
