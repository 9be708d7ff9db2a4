"""What decides whether an indexed row is rewritten: its text's digest, and the rest of the row.

The digest (``backfill.prepare.digest``) covers the embedded text only, and decides whether the post is
embedded again. The row also carries what the text does not: the author (an anonymized user's posts keep
their text but not their name), the topic and post number (a post moved to another topic with the same
title), the category id (a topic moved to another category with no recorded name), the tags, the post
it replies to. A row whose digest is unchanged but whose other columns differ is rewritten in place,
with no embedding (``rewrite``): the index never keeps an old name or an old place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from backfill.prepare import PreparedPost

# The columns `meta_of` compares, in its order (their values come from the source post).
META_COLUMNS = (
    "topic_id",
    "post_number",
    "topic_slug",
    "topic_title",
    "category_id",
    "tags",
    "post_type",
    "reply_to_post_number",
    "username",
)
_SELECT = "SELECT post_id, digest, " + ", ".join(META_COLUMNS) + " FROM post_index"  # noqa: S608 - constants
Meta = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class RowState:
    """An indexed row as far as a refresh compares it."""

    digest: bytes
    meta: Meta


def parse_ts(value: str | None) -> datetime | None:
    """A source's ISO 8601 time, or None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def meta_of(prepared: PreparedPost) -> Meta:
    """The row's columns besides the text, as ``prepared`` would write them."""
    p = prepared.post
    return (
        p.topic_id,
        p.post_number,
        p.topic_slug,
        p.topic_title,
        p.category_id,
        tuple(p.tags),
        p.post_type,
        p.reply_to_post_number,
        p.username,
    )


def _state(row: Sequence[Any]) -> tuple[int, RowState]:
    meta = list(row[2:])
    meta[5] = tuple(meta[5] or ())  # tags: a text[] comes as a list
    return int(row[0]), RowState(bytes(row[1]), tuple(meta))


def states_in(conn: psycopg.Connection, lo: int, hi: int) -> dict[int, RowState]:
    """The indexed rows with post ids in [lo, hi] (one range scan of the primary key)."""
    with conn.transaction():
        rows = conn.execute(_SELECT + " WHERE post_id BETWEEN %s AND %s", (lo, hi)).fetchall()
    return dict(_state(r) for r in rows)


def states_of(conn: psycopg.Connection, post_ids: Iterable[int]) -> dict[int, RowState]:
    """The indexed rows among ``post_ids``."""
    ids = sorted(set(post_ids))
    if not ids:
        return {}
    with conn.transaction():
        rows = conn.execute(_SELECT + " WHERE post_id = ANY(%s::bigint[])", (ids,)).fetchall()
    return dict(_state(r) for r in rows)


def needs(prepared: PreparedPost, state: RowState | None) -> str:
    """``embed`` (new or changed text), ``rewrite`` (same text, other columns changed) or ``keep``."""
    if state is None or state.digest != prepared.digest:
        return "embed"
    return "keep" if state.meta == meta_of(prepared) else "rewrite"


def rewrite(conn: psycopg.Connection, posts: Sequence[PreparedPost]) -> int:
    """Rewrite the rows' columns besides text and vector (inside the caller's transaction, if any); a
    row written meanwhile from a newer version of the post is left as it is (as ``IndexStore``'s
    upserts do)."""
    if not posts:
        return 0
    sets = ", ".join(f"{c} = %s" for c in META_COLUMNS)
    params = []
    for prepared in posts:
        p = prepared.post
        when = parse_ts(p.updated_at)
        params.append(
            (p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.category_id, list(p.tags),
             p.post_type, p.reply_to_post_number, p.username, when, p.post_id, when, when)
        )  # fmt: skip
    with conn.transaction(), conn.cursor() as cur:
        cur.executemany(
            # Built from the constant column names only.
            f"UPDATE post_index SET {sets}, source_updated_at = COALESCE(%s, source_updated_at),"  # noqa: S608
            " updated_at = now() WHERE post_id = %s"
            " AND (source_updated_at IS NULL OR %s::timestamptz IS NULL OR %s >= source_updated_at)",
            params,
        )
    return len(posts)
