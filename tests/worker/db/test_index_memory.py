"""The vector index against the server's memory settings: read from real PostgreSQL, and the advice
the worker logs at its start and ``citebot db status`` prints (issue 18: huge pages halve recall
latency at 425k x 1024-d)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.db import vector_index
from worker.db.vector_index import HUGE_PAGES_ADVISED_BYTES, IndexMemory, read_memory
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.settings import RetrievalSettings

GIB = 2**30


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def memory(index_gib: float, shared_gib: float, huge: str) -> IndexMemory:
    return IndexMemory("post_index_embedding_hnsw", int(index_gib * GIB), int(shared_gib * GIB), huge)


def test_a_large_index_without_huge_pages_is_advised_to_get_them() -> None:
    advice = memory(1.1, 3, "off").advice()
    assert len(advice) == 1
    assert "without huge pages" in advice[0]
    assert "vm.nr_hugepages" in advice[0]
    assert "1.10 GiB" in advice[0]


@pytest.mark.parametrize("huge", ["on", "unknown"])
def test_huge_pages_on_or_unknown_gives_no_huge_pages_advice(huge: str) -> None:
    assert memory(1.1, 3, huge).advice() == []


def test_a_small_index_needs_no_huge_pages() -> None:
    assert memory((HUGE_PAGES_ADVISED_BYTES - 1) / GIB, 1, "off").advice() == []


def test_an_index_larger_than_shared_buffers_is_advised_to_raise_them() -> None:
    advice = memory(2.5, 1, "on").advice()
    assert len(advice) == 1
    assert "more than shared_buffers (1.00 GiB)" in advice[0]


@pytest.mark.integration
def test_read_memory_reads_the_servers_settings(conn: psycopg.Connection) -> None:
    insert_post(conn, 1, angle_vector(10))
    got = read_memory(conn, "halfvec")
    row = conn.execute(
        "SELECT pg_relation_size('post_index_embedding_hnsw'),"
        " pg_size_bytes(current_setting('shared_buffers')), current_setting('huge_pages_status')"
    ).fetchone()
    assert row is not None
    assert got == IndexMemory("post_index_embedding_hnsw", int(row[0]), int(row[1]), str(row[2]))
    assert got.index_bytes > 0
    assert got.huge_pages in ("on", "off")  # PostgreSQL 18 always says
    # The kind that is not built has no index: 0 bytes, not an error.
    assert read_memory(conn, "binary").index_bytes == 0


@pytest.mark.integration
def test_the_worker_logs_the_advice_at_its_start(
    conn: psycopg.Connection, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the threshold at 0 the test database's small index counts as large: the warning appears
    exactly when this server runs without huge pages (both are possible, by the machine's settings)."""
    insert_post(conn, 1, angle_vector(10))
    monkeypatch.setattr(vector_index, "HUGE_PAGES_ADVISED_BYTES", 0)
    index = PostgresPostIndex(
        single_connection(conn), RetrievalSettings.model_validate({}), model="test-model", dimension=8
    )
    with caplog.at_level(logging.WARNING, logger="worker.retrieval.recall"):
        index.check()
    huge = read_memory(conn, "halfvec").huge_pages
    assert ("without huge pages" in caplog.text) == (huge == "off")


@pytest.mark.integration
def test_db_status_prints_the_index_memory(db_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "worker.app.cli", "db", "status"],
        env={"CITEBOT_DATABASE__URL": db_url, "CITEBOT_EMBEDDINGS__DIMENSION": "8", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("vector index "))
    assert "post_index_embedding_hnsw" in line
    assert "shared_buffers" in line
    assert line.rsplit("huge pages ", 1)[1] in ("on", "off")
