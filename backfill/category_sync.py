"""Learning categories from the live forum: a category event, a category the index meets for the first
time, and the worker's start-up sync. The rules of what is recorded are ``backfill.categories``'.

- ``refresh_category`` (webhooks ``category_created``, ``category_updated``, ``category_destroyed``,
  Discourse's Category Event: config/initializers/012-web_hook_events.rb, and ``HasDestroyedWebHook``
  for the destroyed one): the signed body only names the category; ``GET /c/{id}/show.json`` says what
  it is now (a 404: gone, hence restricted). A category made private leaves recall at once;
- ``describe``: the category of a post being indexed, looked up when the table has not described it
  (created after the last backfill, or missing from a lazy-loaded ``/site.json``), with its ancestors;
- ``sync_categories``: ``GET /site.json`` (a partial list) and a look-up of each category the index
  holds posts of but the table has not described (``SYNC_LOOKUPS`` at most per run).
"""

from __future__ import annotations

import logging

import psycopg

from backfill.categories import CategoryList, Known, forget, known, record
from worker.errors import NotFoundError
from worker.protocols import Forum

log = logging.getLogger(__name__)

SYNC_LOOKUPS = 100
MAX_DEPTH = 3  # Discourse's max_category_nesting at most

# Categories the index holds posts of, or that are the parent of a recorded one, whose permissions the
# table does not know.
_UNDESCRIBED_SQL = """
SELECT id FROM (
    SELECT DISTINCT p.category_id AS id FROM post_index p WHERE p.category_id IS NOT NULL
    UNION
    SELECT c.parent_category_id FROM categories c WHERE c.parent_category_id IS NOT NULL
) wanted
WHERE id NOT IN (SELECT category_id FROM categories WHERE read_restricted IS NOT NULL)
ORDER BY id
LIMIT %s
"""


def refresh_category(forum: Forum, conn: psycopg.Connection, category_id: int, event: str) -> str:
    """Record the category as the forum shows it now: ``public``, ``restricted`` or ``forgotten``."""
    try:
        category = forum.get_category(category_id)
    except NotFoundError:
        purged = forget(conn, category_id)
        log.info(
            "category %d is gone (%s): %d posts left the index", category_id, event, purged,
            extra={"event": event},
        )  # fmt: skip
        return "forgotten"
    purged = record(conn, CategoryList((category,)), "event")
    state = "restricted" if category.read_restricted else "public"
    log.info(
        "category %d is %s (%s): %d posts left the index", category_id, state, event, purged,
        extra={"event": event},
    )  # fmt: skip
    _describe_ancestors(forum, conn, category.parent_id)
    return state


def describe(forum: Forum, conn: psycopg.Connection, category_id: int) -> Known | None:
    """What the table says of ``category_id``, after asking the forum when it has not described it (or
    one of its ancestors); None when the forum does not have it (not indexed, as restricted)."""
    info = known(conn, [category_id]).get(category_id)
    if info is None or not info.described:
        try:
            category = forum.get_category(category_id)
        except NotFoundError:
            return None
        record(conn, CategoryList((category,)), "lookup")
        _describe_ancestors(forum, conn, category.parent_id)
    elif not info.citable and not info.restricted:
        _describe_ancestors(forum, conn, _parent_of(conn, category_id))  # an ancestor is undescribed
    return known(conn, [category_id]).get(category_id)


def _parent_of(conn: psycopg.Connection, category_id: int) -> int | None:
    with conn.transaction():
        row = conn.execute(
            "SELECT parent_category_id FROM categories WHERE category_id = %s", (category_id,)
        ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _describe_ancestors(forum: Forum, conn: psycopg.Connection, parent_id: int | None) -> None:
    """Look up the ancestors the table has not described (a post is citable only under described ones)."""
    for _ in range(MAX_DEPTH):
        if parent_id is None:
            return
        info = known(conn, [parent_id]).get(parent_id)
        if info is not None and info.described:
            parent_id = _parent_of(conn, parent_id)
            continue
        try:
            parent = forum.get_category(parent_id)
        except NotFoundError:
            return
        record(conn, CategoryList((parent,)), "lookup")
        parent_id = parent.parent_id


def sync_categories(forum: Forum, conn: psycopg.Connection) -> str:
    """Record what the forum says of its categories now: ``/site.json``, then a look-up of each category
    the index uses that is still undescribed. Returns a summary line."""
    listed = forum.get_site_categories()
    purged = record(conn, CategoryList(listed), "api")
    with conn.transaction():
        missing = [int(r[0]) for r in conn.execute(_UNDESCRIBED_SQL, (SYNC_LOOKUPS,)).fetchall()]
    found = gone = 0
    for category_id in missing:
        try:
            category = forum.get_category(category_id)
        except NotFoundError:
            purged += forget(conn, category_id)
            gone += 1
            continue
        purged += record(conn, CategoryList((category,)), "lookup")
        found += 1
    line = (
        f"categories: {len(listed)} listed, {found} looked up, {gone} gone; "
        f"{purged} posts of restricted categories left the index"
    )
    log.info("%s", line)
    return line
