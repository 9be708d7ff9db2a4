"""The worker pool's checkout check (worker.db.connect.check_connection) against real PostgreSQL."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.worker.retrieval.doubles import angle_vector, insert_post, round_trips
from worker.db import connect
from worker.retrieval.recall import PostgresPostIndex
from worker.settings import DatabaseSettings, RetrievalSettings

pytestmark = pytest.mark.integration


def test_a_connection_handed_out_again_at_once_is_not_pinged(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every checkout cost a round trip, so a recall through the pool took 2 instead of 1."""
    monkeypatch.setattr(connect, "CHECK_BYPASS_S", 0.3)
    pool = connect.open_pool(DatabaseSettings(url=db_url), min_size=1, max_size=1)
    try:
        with pool.connection() as conn:
            insert_post(conn, 1, angle_vector(10))
        index = PostgresPostIndex(
            pool.connection, RetrievalSettings.model_validate({}), model="test-model", dimension=8
        )
        index.recall(angle_vector(0), 1)  # the connection's session gets its knobs
        recall = lambda: index.recall(angle_vector(0), 1)  # noqa: E731
        assert round_trips(conn, recall) == 1  # handed out just now: not checked again
        time.sleep(0.35)
        assert round_trips(conn, recall) == 2  # past the window: the check's round trip, then the query
    finally:
        pool.close()


def test_a_broken_connection_is_replaced_after_the_window(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect, "CHECK_BYPASS_S", 0.2)
    pool = connect.open_pool(DatabaseSettings(url=db_url), min_size=1, max_size=1)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        time.sleep(0.25)
        with pool.connection() as fresh:  # the check finds it broken, and the pool gives a new one
            assert fresh.execute("SELECT 1").fetchone() == (1,)
            assert fresh.info.backend_pid != pid
    finally:
        pool.close()
