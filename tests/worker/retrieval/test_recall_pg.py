"""PostgresPostIndex against real PostgreSQL + pgvector (8-d test space)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import psycopg
import pytest
from pgvector import HalfVector
from pgvector.psycopg import register_vector
from psycopg.pq import TransactionStatus

from tests.worker.retrieval.doubles import angle_vector, describe_category, insert_post, round_trips, unit
from worker.errors import IndexMismatchError, ServiceUnavailableError
from worker.retrieval.keyword import PostgresTermStats
from worker.retrieval.recall import RECALL_SQL, ConnectionSource, PostgresPostIndex, single_connection
from worker.settings import RetrievalSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def index_over(conn: psycopg.Connection, **settings: object) -> PostgresPostIndex:
    return PostgresPostIndex(
        single_connection(conn),
        RetrievalSettings.model_validate(settings),
        model="test-model",
        dimension=8,
    )


def hnsw_only(conn: psycopg.Connection) -> ConnectionSource:
    """A connection on which the planner may not fall back to a sequential scan + sort (tiny tables)."""
    conn.execute("SET enable_seqscan = off")
    return single_connection(conn)


def test_recall_orders_by_cosine_and_reports_it(conn: psycopg.Connection) -> None:
    for post_id, angle in [(1, 40), (2, 5), (3, 90), (4, 20), (5, 170)]:
        insert_post(conn, post_id, angle_vector(angle))
    got = index_over(conn).recall(angle_vector(0), 4)
    assert [c.post_id for c in got] == [2, 4, 1, 3]
    assert [c.vector_rank for c in got] == [1, 2, 3, 4]
    assert got[0].cosine == pytest.approx(np.cos(np.radians(5)), abs=2e-3)
    assert got[3].cosine == pytest.approx(0.0, abs=2e-3)
    assert got[0].topic_title == "Topic 2"
    assert got[0].text == "Topic 2\n\nbody of post 2"


def test_restricted_category_is_excluded_at_query_time(conn: psycopg.Connection) -> None:
    insert_post(conn, 1, angle_vector(1), category_id=5)
    insert_post(conn, 2, angle_vector(2), category_id=6)
    insert_post(conn, 3, angle_vector(3), category_id=7)
    index = index_over(conn)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [1, 2, 3]
    # The category became restricted after its posts were indexed: they vanish at once.
    describe_category(conn, 5, restricted=True)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [2, 3]
    assert index.posts([1, 2]).keys() == {2}
    assert index.citable_categories() == frozenset({6, 7})
    describe_category(conn, 5)
    assert [c.post_id for c in index.recall(angle_vector(0), 3)] == [1, 2, 3]


def test_only_categories_the_forum_described_as_public_are_recalled(conn: psycopg.Connection) -> None:
    """Fail closed: an undescribed category, a category with no parent row, a subcategory of a
    restricted category and a post without category are never recalled."""
    insert_post(conn, 1, angle_vector(1), category_id=5)
    insert_post(conn, 2, angle_vector(2), category_id=None)
    insert_post(conn, 3, angle_vector(3), category_id=8)
    insert_post(conn, 4, angle_vector(4), category_id=9)
    conn.execute("DELETE FROM categories WHERE category_id = 8")  # never described
    conn.execute("UPDATE categories SET parent_category_id = 10 WHERE category_id = 9")  # parent unknown
    index = index_over(conn)
    assert [c.post_id for c in index.recall(angle_vector(0), 4)] == [1]
    describe_category(conn, 10)
    assert [c.post_id for c in index.recall(angle_vector(0), 4)] == [1, 4]
    conn.execute("UPDATE categories SET parent_category_id = 11 WHERE category_id = 10")
    describe_category(conn, 11, restricted=True)  # the grandparent is restricted
    assert [c.post_id for c in index.recall(angle_vector(0), 4)] == [1]
    assert index.posts([1, 2, 3, 4]).keys() == {1}


def test_exclude_post_ids(conn: psycopg.Connection) -> None:
    for post_id in range(1, 6):
        insert_post(conn, post_id, angle_vector(post_id * 10))
    got = index_over(conn).recall(angle_vector(0), 3, exclude_post_ids=[1, 3])
    assert [c.post_id for c in got] == [2, 4, 5]


def fill_random(conn: psycopg.Connection, n: int, restricted_share: float) -> np.ndarray:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cats = np.where(rng.random(n) < restricted_share, 1, 2)
    with (
        conn.cursor() as cur,
        cur.copy(
            "COPY post_index (post_id, topic_id, post_number, topic_slug, topic_title, category_id, text,"
            " digest, model, embedding) FROM STDIN"
        ) as copy,
    ):
        for i, (v, c) in enumerate(zip(vectors, cats, strict=True), start=1):
            copy.write_row((i, i, 1, "s", "t", int(c), "x", b"\0", "test-model", HalfVector(v)))
    conn.execute("ANALYZE post_index")
    return cats


def test_filtered_queries_still_return_k_rows(conn: psycopg.Connection) -> None:
    cats = fill_random(conn, 2000, restricted_share=0.7)
    describe_category(conn, 1, restricted=True)
    describe_category(conn, 2)
    source = hnsw_only(conn)
    query = unit([1, 0.5, -0.2, 0.1, 0, 0.3, -0.4, 0.2])
    plan = "\n".join(
        r[0] for r in conn.execute("EXPLAIN " + RECALL_SQL, {"q": HalfVector(query), "k": 25, "exclude": []})
    )
    assert "post_index_embedding_hnsw" in plan
    assert "post_index_category_idx" not in plan  # the allow-list stays a filter of the ordered scan

    settings = {"ef_search": 40, "max_scan_tuples": 20000}
    relaxed = PostgresPostIndex(
        source,
        RetrievalSettings.model_validate({**settings, "iterative_scan": "relaxed_order"}),
        model="test-model",
        dimension=8,
    ).recall(query, 25)
    off = PostgresPostIndex(
        source,
        RetrievalSettings.model_validate({**settings, "iterative_scan": "off"}),
        model="test-model",
        dimension=8,
    ).recall(query, 25)
    # Without the iterative scan, ef_search=40 candidates minus ~70 % restricted leaves fewer than 25.
    assert len(off) < 25
    assert len(relaxed) == 25
    assert all(cats[c.post_id - 1] == 2 for c in relaxed)
    cosines = [c.cosine or 0.0 for c in relaxed]
    assert cosines == sorted(cosines, reverse=True)  # relaxed order re-sorted by distance in SQL
    # Nearly all of the exact top 25 among eligible posts (HNSW is approximate).
    exact = conn.execute(
        "SELECT post_id FROM post_index WHERE category_id = 2 ORDER BY (embedding <=> %s) + 0 LIMIT 25",
        (HalfVector(query),),
    ).fetchall()
    overlap = len({r[0] for r in exact} & {c.post_id for c in relaxed})
    assert overlap >= 23
    # The connection's session holds the knobs of the last recall (set once, not per query).
    assert conn.execute("SHOW hnsw.iterative_scan").fetchone() == ("off",)
    relaxed_index = PostgresPostIndex(
        source,
        RetrievalSettings.model_validate({**settings, "iterative_scan": "relaxed_order"}),
        model="test-model",
        dimension=8,
    )
    assert len(relaxed_index.recall(query, 25)) == 25
    assert conn.execute("SHOW hnsw.iterative_scan").fetchone() == ("relaxed_order",)


def test_a_recall_is_one_round_trip_once_the_knobs_are_set(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:  # not autocommit, as a pooled connection
        register_vector(conn)
        for post_id in range(1, 6):
            insert_post(conn, post_id, angle_vector(post_id * 10))
        conn.commit()
        wide = index_over(conn, ef_search=120)
        narrow = index_over(conn, ef_search=60)
        query = angle_vector(0)
        # The first recall on a connection sets its session's knobs, the next ones only query
        # (before: BEGIN, set_config, the query and COMMIT every time, 4 round trips).
        assert round_trips(conn, lambda: wide.recall(query, 3)) == 2
        assert round_trips(conn, lambda: wide.recall(query, 3)) == 1
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("120",)
        conn.rollback()
        # Another index with other knobs on the same connection sets its own, and back.
        assert round_trips(conn, lambda: narrow.recall(query, 3)) == 2
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("60",)
        conn.rollback()
        assert round_trips(conn, lambda: wide.recall(query, 3)) == 2
        assert [c.post_id for c in wide.recall(query, 3)] == [1, 2, 3]
        assert sorted(index_over(conn).posts([2, 4])) == [2, 4]
        # The connection is handed back as it came: idle, not in autocommit.
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert not conn.autocommit


def test_a_recall_inside_the_callers_transaction_keeps_its_knobs_local(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        insert_post(conn, 1, angle_vector(10))
        conn.commit()
        index_over(conn, ef_search=120).recall(angle_vector(0), 1)  # the session's knobs
        with conn.transaction():
            insert_post(conn, 2, angle_vector(1))  # not committed: seen only inside the transaction
            got = index_over(conn, ef_search=60).recall(angle_vector(0), 2)
            assert [c.post_id for c in got] == [2, 1]
            assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("60",)
        assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("120",)
        conn.rollback()


def test_another_models_vectors_fail_loudly(conn: psycopg.Connection) -> None:
    insert_post(conn, 1, angle_vector(0))
    wrong_model = PostgresPostIndex(
        single_connection(conn),
        RetrievalSettings.model_validate({}),
        model="other-model",
        dimension=8,
    )
    with pytest.raises(IndexMismatchError, match="other-model"):
        wrong_model.check()
    with pytest.raises(IndexMismatchError, match="3 dimensions"):
        index_over(conn).recall([1.0, 0.0, 0.0], 1)


def test_is_empty_posts_and_neighbours(conn: psycopg.Connection) -> None:
    index = index_over(conn)
    assert index.is_empty()
    for n in range(1, 7):
        insert_post(conn, 100 + n, angle_vector(n), topic_id=9, post_number=n, text=f"reply {n}")
    insert_post(conn, 200, angle_vector(0), topic_id=10, post_number=2)
    assert not index.is_empty()
    around = index.neighbours(9, 3, 1)
    assert [c.post_number for c in around] == [2, 4]
    assert [c.post_number for c in index.neighbours(9, 1, 2)] == [2, 3]
    assert index.neighbours(9, 3, 0) == []
    assert sorted(index.posts([101, 200, 999])) == [101, 200]


def test_unreachable_database_is_a_transient_error() -> None:
    @contextmanager
    def refused() -> Iterator[psycopg.Connection]:
        yield psycopg.connect("postgresql://127.0.0.1:1/none", connect_timeout=1)

    index = PostgresPostIndex(refused, RetrievalSettings.model_validate({}), model="m", dimension=8)
    with pytest.raises(ServiceUnavailableError):
        index.is_empty()


def test_document_frequencies_from_the_index(conn: psycopg.Connection) -> None:
    stats = PostgresTermStats(single_connection(conn))
    assert stats() is None  # empty index: no table (terms fall back to length)
    texts = ["shadow map bias", "shadow cascade", "shadow softness and bias", "animation blending"]
    for i, text in enumerate(texts, start=1):
        insert_post(conn, i, angle_vector(i), title="", text=text)
    fresh = PostgresTermStats(single_connection(conn))
    table = fresh()
    assert table is not None
    assert table.total == 4
    assert table.counts["shadow"] == 3
    assert table.counts["bias"] == 2
    assert table.counts["animation"] == 1
    assert "and" in table.counts  # stop-words are dropped by the selector, not by the table


def test_an_index_with_the_older_graph_keeps_ef_search_200_unless_it_is_set(
    conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18: ef_search 40 (the default since the m=24, ef_construction=128 graph) found recall@25
    0.74-0.79 on the m=16, ef_construction=64 graph at 425k, where 200 found 0.97."""
    insert_post(conn, 1, angle_vector(10))
    current = index_over(conn)
    with caplog.at_level(logging.WARNING, logger="worker.retrieval.recall"):
        current.check()  # a migrated database: its empty index was rebuilt with today's graph (0010)
    assert caplog.records == []
    current.recall(angle_vector(0), 1)
    assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("40",)

    conn.execute("DROP INDEX post_index_embedding_hnsw")
    conn.execute(
        "CREATE INDEX post_index_embedding_hnsw ON post_index USING hnsw (embedding halfvec_cosine_ops)"
        " WITH (m = 16, ef_construction = 64)"
    )
    older = index_over(conn)
    with caplog.at_level(logging.WARNING, logger="worker.retrieval.recall"):
        older.check()
    assert "ef_search 200 for it" in caplog.text
    assert [c.post_id for c in older.recall(angle_vector(0), 1)] == [1]
    assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("200",)
    # Set explicitly, ef_search is the operator's: kept, with the warning.
    caplog.clear()
    chosen = index_over(conn, ef_search=60)
    with caplog.at_level(logging.WARNING, logger="worker.retrieval.recall"):
        chosen.check()
    assert "recall may be lower" in caplog.text
    chosen.recall(angle_vector(0), 1)
    assert conn.execute("SHOW hnsw.ef_search").fetchone() == ("60",)
