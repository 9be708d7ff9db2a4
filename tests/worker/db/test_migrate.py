from __future__ import annotations

import threading

import numpy as np
import psycopg
import pytest

from tests.conftest import make_settings
from worker.db.connect import connect
from worker.db.meta import check_index_meta
from worker.db.migrate import load_migrations, migrate
from worker.errors import IndexMismatchError, ServiceUnavailableError

pytestmark = pytest.mark.integration


def test_migrations_apply_once_then_are_idempotent(empty_db_url: str) -> None:
    settings = make_settings(empty_db_url, "redis://127.0.0.1:1/0")
    first = migrate(settings)
    assert first.applied == tuple(m.version for m in load_migrations(8))
    second = migrate(settings)
    assert second.applied == ()
    assert second.already == first.applied
    with psycopg.connect(empty_db_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        typ = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'post_index'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert {"post_index", "answers", "backfill_state", "schema_migrations", "index_meta"} <= tables
    assert typ == ("halfvec(8)",)


def test_concurrent_migrations_do_not_collide(empty_db_url: str) -> None:
    settings = make_settings(empty_db_url, "redis://127.0.0.1:1/0")
    results: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(settings).applied)
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = [r for r in results if r]
    assert len(applied) == 1  # exactly one run did the work, the others found it done
    with psycopg.connect(empty_db_url) as conn:
        count = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert count == (len(load_migrations(8)),)


def test_index_meta_mismatch_fails_loudly(db_url: str) -> None:
    with connect(make_settings(db_url, "redis://127.0.0.1:1/0").database) as conn:
        assert check_index_meta(conn, "test-model", 8).dimension == 8
        with pytest.raises(IndexMismatchError, match="--reindex"):
            check_index_meta(conn, "other-model", 8)
        with pytest.raises(IndexMismatchError, match="1024-d"):
            check_index_meta(conn, "test-model", 1024)


def test_migrate_with_other_dimension_keeps_recorded_meta(db_url: str) -> None:
    report = migrate(
        make_settings(db_url, "redis://127.0.0.1:1/0", embeddings={"model": "m2", "dimension": 16})
    )
    assert report.meta_matches is False
    assert (report.meta_model, report.meta_dimension) == ("test-model", 8)


def test_unreachable_database_is_transient() -> None:
    settings = make_settings("postgresql://nobody@127.0.0.1:1/none", "redis://127.0.0.1:1/0")
    with pytest.raises(ServiceUnavailableError, match="cannot connect"):
        connect(settings.database)


def _toast_bytes(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'post_index'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_1024_d_vectors_stay_in_the_heap_also_after_a_reindex(empty_db_url: str) -> None:
    """Issue 18: a 1024-d halfvec (2,052 bytes) went to TOAST, and every re-ranked row paid for it."""
    from pgvector import HalfVector
    from pgvector.psycopg import register_vector

    from backfill.store import IndexStore

    settings = make_settings(
        empty_db_url, "redis://127.0.0.1:1/0", embeddings={"model": "m", "dimension": 1024}
    )
    migrate(settings)
    insert = (
        "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title, text, digest,"
        " model, embedding) VALUES (%s, 1, %s, 's', 't', 'x', '\\x00', 'm', %s)"
    )
    rng = np.random.default_rng(0)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        register_vector(conn)
        for i in range(1, 41):
            conn.execute(insert, (i, i, HalfVector(rng.standard_normal(1024))))
        assert _toast_bytes(conn) == 0
        # A reindex changes the column's type, which resets its storage: it must set it again.
        IndexStore(conn, "m").reindex("m2", 1024, "post-v1")
        for i in range(1, 41):
            conn.execute(insert.replace("'m'", "'m2'"), (i, i, HalfVector(rng.standard_normal(1024))))
        assert _toast_bytes(conn) == 0
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute"
            " WHERE attrelid = 'post_index'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert storage == ("m",)
