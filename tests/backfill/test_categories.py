"""The categories table and its rule (backfill/categories.py, migration 0011) on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from backfill.categories import CategoryList, forget, known, record, restricted_ids
from tests.backfill.conftest import recorded_categories
from worker.db.migrate import load_migrations
from worker.domain import ForumCategory

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url) as c:
        yield c


def cat(
    cid: int, restricted: bool = False, parent: int | None = None, name: str | None = None
) -> ForumCategory:
    return ForumCategory(cid, name or f"C{cid}", restricted, parent)


def citable(conn: psycopg.Connection) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT category_id FROM citable_categories")}


def test_a_partial_list_records_what_it_lists_and_forgets_nothing(
    conn: psycopg.Connection, db_url: str
) -> None:
    record(conn, CategoryList((cat(1), cat(2, True), cat(3))), "db")
    record(conn, CategoryList((cat(1, name=None),)), "api")  # /site.json, lazily loaded: one category
    assert recorded_categories(db_url) == {1: ("C1", False), 2: ("C2", True), 3: ("C3", False)}
    assert citable(conn) == {1, 3}


def test_a_complete_list_forgets_the_deleted_categories(conn: psycopg.Connection, db_url: str) -> None:
    record(conn, CategoryList((cat(1), cat(2), cat(3))), "db")
    record(conn, CategoryList((cat(1), cat(3)), complete=True), "db")
    assert set(recorded_categories(db_url)) == {1, 3}


def test_ancestors_decide_with_the_category(conn: psycopg.Connection) -> None:
    record(conn, CategoryList((cat(1), cat(2, parent=1), cat(3, parent=2), cat(4, parent=9))), "db")
    assert citable(conn) == {1, 2, 3}  # 4's parent was never described
    record(conn, CategoryList((cat(1, True),)), "event")
    assert citable(conn) == set()
    assert restricted_ids(conn) == {1, 2, 3}
    assert known(conn, [3])[3].restricted
    assert not known(conn, [4])[4].restricted  # unknown parent: not cited, but nothing says restricted


def test_restricting_a_category_purges_its_posts_and_its_subcategories(conn: psycopg.Connection) -> None:
    record(conn, CategoryList((cat(1), cat(2, parent=1), cat(5))), "db")
    for post_id, category in ((1, 1), (2, 2), (3, 5)):
        conn.execute(
            "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title, category_id,"
            " text, digest, model, embedding)"
            " VALUES (%s, %s, 1, 's', 't', %s, 'x', '\\x00', 'test-model', '[1,0,0,0,0,0,0,0]')",
            (post_id, post_id, category),
        )
    assert record(conn, CategoryList((cat(1, True),)), "event") == 2
    assert forget(conn, 5) == 1
    assert conn.execute("SELECT count(*) FROM post_index").fetchone() == (0,)


def test_migration_0011_keeps_what_was_known_and_makes_nothing_citable(empty_db_url: str) -> None:
    """Upgrading: names survive, restricted stays restricted, and no category is public until the forum
    says so (the worker's start-up sync, a backfill, an event)."""
    migrations = load_migrations(8)
    before = [m for m in migrations if m.version < "0011"]
    with psycopg.connect(empty_db_url) as c:
        for m in before:
            c.execute(m.sql.encode())
        c.execute("INSERT INTO category_names (category_id, name) VALUES (1, 'Support'), (2, 'Staff')")
        c.execute("INSERT INTO restricted_categories (category_id) VALUES (2), (3)")
        c.execute(next(m for m in migrations if m.version.startswith("0011")).sql.encode())
        rows = c.execute("SELECT category_id, name, read_restricted FROM categories ORDER BY 1").fetchall()
        assert rows == [(1, "Support", None), (2, "Staff", True), (3, None, True)]
        assert citable(c) == set()
        assert c.execute("SELECT to_regclass('restricted_categories')").fetchone() == (None,)
