"""The forum's categories as citebot knows them: the ``categories`` table (migration 0011) and its rule.

Fail closed: a post is citable only when its category is recorded with ``read_restricted = false`` and
so is every ancestor (the ``citable_categories`` view, read by every eligibility query). A category the
forum has not described is restricted. Who may write a row, and how:

- a backfill source's list (``record``): every category it lists is written as listed; a *complete*
  list (the replica's ``categories`` table) also forgets the categories it lacks (deleted on the
  forum). A partial list (``/site.json`` with lazy-loaded categories lists only the caller's sidebar,
  an export's ``categories.json`` only what its taker could see) forgets nothing, so it never widens
  what is public and never revives a category another list or an event restricted;
- a category webhook, or a look-up of a category the index meets for the first time: one row
  (``GET /c/{id}/show.json``; a 404 forgets it).

A category that becomes restricted (or is forgotten) takes its posts and its subcategories' posts out of
the index at once (``purge``): recall already skips them, and the index keeps no restricted text.
A category made public comes back post by post, with the next backfill run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from worker.domain import ForumCategory

log = logging.getLogger(__name__)

# Subcategories of the given categories, at any depth (Discourse nests at most three levels).
_DESCENDANTS_SQL = """
WITH RECURSIVE tree(category_id) AS (
    SELECT unnest(%s::bigint[])
    UNION
    SELECT c.category_id FROM categories c JOIN tree t ON c.parent_category_id = t.category_id
)
SELECT category_id FROM tree
"""


@dataclass(frozen=True, slots=True)
class CategoryList:
    """The categories a source knows. ``complete``: every category of the forum is listed, so one that
    is missing was deleted (the replica's table); False for any list a reader's rights may have cut."""

    categories: tuple[ForumCategory, ...]
    complete: bool = False


@dataclass(frozen=True, slots=True)
class Known:
    """A recorded category: its name, whether its permissions are known (``described``), whether it is
    citable now (it and its ancestors public) and whether it or an ancestor is recorded as restricted
    (its posts are not indexed)."""

    name: str | None
    described: bool
    citable: bool
    restricted: bool


def record(conn: psycopg.Connection, listed: CategoryList, seen_by: str) -> int:
    """Write what ``listed`` says, in one transaction; returns the posts purged from the index."""
    rows = listed.categories
    with conn.transaction():
        if rows:
            conn.execute(
                "INSERT INTO categories (category_id, name, parent_category_id, read_restricted, seen_by)"
                " SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::boolean[], %s::text[])"
                " ON CONFLICT (category_id) DO UPDATE SET"
                " name = COALESCE(EXCLUDED.name, categories.name),"
                " parent_category_id = EXCLUDED.parent_category_id,"
                " read_restricted = EXCLUDED.read_restricted,"
                " seen_by = EXCLUDED.seen_by, seen_at = now()",
                (
                    [c.id for c in rows],
                    [c.name for c in rows],
                    [c.parent_id for c in rows],
                    [c.read_restricted for c in rows],
                    [seen_by] * len(rows),
                ),
            )
        gone: list[int] = []
        if listed.complete:
            cur = conn.execute(
                "DELETE FROM categories WHERE category_id <> ALL(%s::bigint[]) RETURNING category_id",
                ([c.id for c in rows],),
            )
            gone = [int(r[0]) for r in cur.fetchall()]
        narrowed = [c.id for c in rows if c.read_restricted] + gone
        purged = _purge(conn, narrowed)
    if purged:
        log.info("%d posts of restricted or deleted categories left the index", purged)
    return purged


def forget(conn: psycopg.Connection, category_id: int) -> int:
    """The forum no longer has the category (or no longer shows it): it is unknown, hence restricted;
    returns the posts purged."""
    with conn.transaction():
        conn.execute("DELETE FROM categories WHERE category_id = %s", (category_id,))
        return _purge(conn, [category_id])


def _purge(conn: psycopg.Connection, category_ids: Iterable[int]) -> int:
    """Remove the indexed posts of these categories and of their subcategories (inside the caller's
    transaction); a subcategory of a restricted category is not citable either (``citable_categories``)."""
    ids = sorted(set(category_ids))
    if not ids:
        return 0
    tree = [int(r[0]) for r in conn.execute(_DESCENDANTS_SQL, (ids,)).fetchall()]
    cur = conn.execute(
        "DELETE FROM post_index WHERE category_id = ANY(%s::bigint[])"
        " AND category_id <> ALL(ARRAY(SELECT category_id FROM citable_categories))",
        (tree,),
    )
    return cur.rowcount


def known(conn: psycopg.Connection, category_ids: Iterable[int]) -> dict[int, Known]:
    """What the table says about each of ``category_ids`` (absent: never described)."""
    ids = sorted(set(category_ids))
    if not ids:
        return {}
    with conn.transaction():
        rows = conn.execute(
            "SELECT c.category_id, c.name, c.read_restricted,"
            "       c.category_id = ANY(ARRAY(SELECT category_id FROM citable_categories)),"
            "       c.read_restricted IS TRUE OR EXISTS ("
            "           SELECT 1 FROM categories a"
            "           WHERE a.read_restricted AND a.category_id IN (c.parent_category_id,"
            "               (SELECT p.parent_category_id FROM categories p"
            "                WHERE p.category_id = c.parent_category_id)))"
            " FROM categories c WHERE c.category_id = ANY(%s::bigint[])",
            (ids,),
        ).fetchall()
    return {
        int(r[0]): Known(name=r[1], described=r[2] is not None, citable=bool(r[3]), restricted=bool(r[4]))
        for r in rows
    }


def names(conn: psycopg.Connection) -> dict[int, str]:
    """The recorded name of each category that has one: the one place an indexed post's text takes its
    ``Category:`` line from (``backfill.prepare.compose_text``), whichever source read the post. An
    export without ``categories.json`` and the API's ``/site.json`` then give the same text, and an
    unchanged post is not embedded again when the next run reads it through another source."""
    with conn.transaction():
        rows = conn.execute("SELECT category_id, name FROM categories WHERE name IS NOT NULL").fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


def restricted_ids(conn: psycopg.Connection) -> frozenset[int]:
    """Categories recorded as read-restricted, or under one that is: their posts are not indexed."""
    with conn.transaction():
        seeds = [int(r[0]) for r in conn.execute("SELECT category_id FROM categories WHERE read_restricted")]
        if not seeds:
            return frozenset()
        rows = conn.execute(_DESCENDANTS_SQL, (seeds,)).fetchall()
    return frozenset(int(r[0]) for r in rows)
