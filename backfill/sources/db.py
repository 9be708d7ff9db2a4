"""Posts from a read-only Discourse PostgreSQL replica.

Keyset pagination by ``posts.id`` (``WHERE p.id > %s ORDER BY p.id LIMIT n``: constant cost per page,
unlike OFFSET). Eligibility is decided in SQL (the same rule as ``backfill.evidence.ineligibility``): the
text columns and the tag list are fetched for eligible posts only, while every post of the range comes
back with its flags so the pipeline removes the ineligible ones from the index. The connection is
read-only (``default_transaction_read_only``) and only reads the columns docs/backfill.md lists.

Categories: the replica's ``categories`` table is the complete list (``backfill.categories``: a category
it lacks was deleted). Tags: only those an anonymous reader sees (``PUBLIC_TAG_SQL``, Discourse's
``DiscourseTagging.visible_tags``: a tag no tag group restricts, or one in a group the ``everyone``
group may see; lib/discourse_tagging.rb).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import psycopg

from backfill.categories import CategoryList
from backfill.evidence import REPLY_WINDOW
from backfill.sources import SourceBatch, SourcePost
from worker.db.boundary import database_errors
from worker.domain import ForumCategory
from worker.errors import ConfigError

ELIGIBLE_SQL = """
    p.post_type = 1 AND p.deleted_at IS NULL AND NOT p.hidden AND NOT p.user_deleted
    AND t.id IS NOT NULL AND t.archetype = 'regular' AND t.visible AND t.deleted_at IS NULL
    AND NOT COALESCE(c.read_restricted, false) AND NOT COALESCE(pc.read_restricted, false)
"""

# A tag an anonymous reader sees: in no tag group with permissions, or in one whose permissions name
# the everyone group (id 0). DiscourseTagging.visible_tags; a group without permission rows restricts
# nothing (TagGroupSerializer shows it as everyone: full).
PUBLIC_TAG_SQL = """
    (NOT EXISTS (SELECT 1 FROM tag_group_memberships m
                 JOIN tag_group_permissions gp ON gp.tag_group_id = m.tag_group_id
                 WHERE m.tag_id = tg.id)
     OR EXISTS (SELECT 1 FROM tag_group_memberships m
                JOIN tag_group_permissions gp ON gp.tag_group_id = m.tag_group_id
                WHERE m.tag_id = tg.id AND gp.group_id = 0))
"""

# Built from constants only (no input): the f-string just shares the eligibility rule.
PAGE_SQL = f"""
SELECT p.id, p.topic_id, p.post_number, COALESCE(t.slug, ''), COALESCE(t.title, ''), t.category_id, c.name,
       CASE WHEN e.eligible THEN ARRAY(
           SELECT tg.name FROM topic_tags tt JOIN tags tg ON tg.id = tt.tag_id
           WHERE tt.topic_id = p.topic_id AND {PUBLIC_TAG_SQL} ORDER BY tg.name) END,
       CASE WHEN e.eligible THEN p.cooked END,
       CASE WHEN e.eligible AND COALESCE(p.cooked, '') = '' THEN p.raw END,
       p.post_type, p.hidden, p.deleted_at IS NOT NULL OR p.user_deleted,
       COALESCE(t.archetype, 'regular'), COALESCE(t.visible, false), t.id IS NULL OR t.deleted_at IS NOT NULL,
       COALESCE(c.read_restricted, false) OR COALESCE(pc.read_restricted, false),
       u.username, p.updated_at, p.reply_to_post_number, ru.username
FROM posts p
LEFT JOIN topics t ON t.id = p.topic_id
LEFT JOIN categories c ON c.id = t.category_id
LEFT JOIN categories pc ON pc.id = c.parent_category_id
LEFT JOIN users u ON u.id = p.user_id
LEFT JOIN posts rp ON rp.topic_id = p.topic_id AND rp.post_number = p.reply_to_post_number
LEFT JOIN users ru ON ru.id = rp.user_id
CROSS JOIN LATERAL (SELECT {ELIGIBLE_SQL} AS eligible) e
WHERE p.id > %s
ORDER BY p.id
LIMIT %s
"""  # noqa: S608

# The first replies of each topic whose first post is on the page (backfill.evidence: open question or
# answered). Columns are those of PAGE_SQL that evidence reads; one page of the stream per topic.
REPLIES_SQL = f"""
SELECT r.topic_id, r.id, r.post_number, r.cooked, r.post_type, r.hidden,
       r.deleted_at IS NOT NULL OR r.user_deleted, u.username, ru.username
FROM unnest(%s::bigint[]) AS q(topic_id)
CROSS JOIN LATERAL (
    SELECT * FROM posts x WHERE x.topic_id = q.topic_id AND x.post_number > 1
    ORDER BY x.post_number LIMIT {REPLY_WINDOW - 1}
) r
LEFT JOIN users u ON u.id = r.user_id
LEFT JOIN posts rp ON rp.topic_id = r.topic_id AND rp.post_number = r.reply_to_post_number
LEFT JOIN users ru ON ru.id = rp.user_id
"""  # noqa: S608


# The solved plugin's accepted answers (discourse-solved; read only for ``citebot calibrate``): its table
# since 2025 (db/migrate/20250318024953_copy_solved_topic_custom_field_to_discourse_solved_solved_topics.rb),
# before it the topic custom field ``accepted_answer_post_id`` (the post id as text).
ACCEPTED_SQL = {
    "discourse_solved_solved_topics": (
        "SELECT answer_post_id FROM discourse_solved_solved_topics WHERE answer_post_id = ANY(%s::bigint[])"
    ),
    "topic_custom_fields": (
        "SELECT CAST(value AS bigint) FROM topic_custom_fields "
        "WHERE name = 'accepted_answer_post_id' AND value = ANY(%s::text[])"
    ),
}


class DbSource:
    """A Discourse database replica, read with keyset pagination."""

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0, accepted: bool = False) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError("--database-url-source must be a postgresql:// URL of the Discourse replica")
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.accepted = accepted  # mark the solved plugin's accepted answers (``SourcePost.accepted_answer``)
        self._accepted_from: str | None = None
        self._conn: psycopg.Connection | None = None

    @property
    def key(self) -> str:
        return "db"

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            with database_errors(
                "cannot connect to the Discourse replica", service="discourse-db", connecting=True
            ):
                conn = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=max(1, int(self.connect_timeout_s))
                )
            conn.execute("SET default_transaction_read_only = on")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def categories(self) -> CategoryList | None:
        """Every category of the forum: the complete list."""
        rows = (
            self._connection()
            .execute("SELECT id, name, read_restricted, parent_category_id FROM categories")
            .fetchall()
        )
        return CategoryList(
            tuple(ForumCategory(int(r[0]), r[1], bool(r[2]), _int(r[3])) for r in rows), complete=True
        )

    def estimate(self, cursor: int | None) -> int | None:
        sql = "SELECT count(*) FROM posts WHERE id > %s"
        row = self._connection().execute(sql, (cursor or 0,)).fetchone()
        return int(row[0]) if row else None

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        after = cursor if cursor is not None else 0
        while True:
            rows = self._connection().execute(PAGE_SQL, (after, batch_size)).fetchall()
            if not rows:
                return
            posts = self._with_replies(tuple(_post(r) for r in rows))
            if self.accepted:
                posts = self._with_accepted(posts)
            hi = posts[-1].post_id
            yield SourceBatch(posts, after + 1, hi, hi)
            after = hi
            if len(rows) < batch_size:
                return

    def _with_accepted(self, posts: tuple[SourcePost, ...]) -> tuple[SourcePost, ...]:
        """Mark the page's accepted answers (``ACCEPTED_SQL``: the plugin's table, else its custom field;
        neither: the forum has no solved plugin and nothing is marked)."""
        conn = self._connection()
        if self._accepted_from is None:
            found = [t for t in ACCEPTED_SQL if _exists(conn, t)]
            self._accepted_from = found[0] if found else ""
        if not self._accepted_from or not posts:
            return posts
        ids: list[int] | list[str] = [p.post_id for p in posts]
        if self._accepted_from == "topic_custom_fields":
            ids = [str(i) for i in ids]
        accepted = {int(r[0]) for r in conn.execute(ACCEPTED_SQL[self._accepted_from], (ids,)).fetchall()}
        return tuple(replace(p, accepted_answer=True) if p.post_id in accepted else p for p in posts)

    def _with_replies(self, posts: tuple[SourcePost, ...]) -> tuple[SourcePost, ...]:
        """Give each first post the first replies of its topic (one query per page)."""
        topics = sorted({p.topic_id for p in posts if p.post_number == 1})
        if not topics:
            return posts
        replies: dict[int, list[SourcePost]] = {t: [] for t in topics}
        for r in self._connection().execute(REPLIES_SQL, (topics,)).fetchall():
            replies[int(r[0])].append(
                SourcePost(
                    post_id=int(r[1]),
                    topic_id=int(r[0]),
                    post_number=int(r[2]),
                    topic_slug="",
                    topic_title="",
                    category_id=None,
                    category_name=None,
                    tags=(),
                    cooked=r[3] or "",
                    post_type=int(r[4]),
                    hidden=bool(r[5]),
                    deleted=bool(r[6]),
                    username=r[7],
                    reply_to_username=r[8],
                )
            )
        return tuple(
            replace(p, replies=tuple(replies[p.topic_id])) if p.post_number == 1 else p for p in posts
        )


def _exists(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _iso(value: Any) -> str | None:
    # Discourse stores UTC in ``timestamp without time zone`` columns.
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return str(value) if value else None


def _post(r: tuple[Any, ...]) -> SourcePost:
    return SourcePost(
        post_id=int(r[0]),
        topic_id=int(r[1]),
        post_number=int(r[2]),
        topic_slug=r[3],
        topic_title=r[4],
        category_id=int(r[5]) if r[5] is not None else None,
        category_name=r[6],
        tags=tuple(r[7] or ()),
        cooked=r[8] or "",
        raw=r[9],
        post_type=int(r[10]),
        hidden=bool(r[11]),
        deleted=bool(r[12]),
        archetype=r[13],
        topic_visible=bool(r[14]),
        topic_deleted=bool(r[15]),
        category_read_restricted=bool(r[16]),
        username=r[17],
        updated_at=_iso(r[18]),
        reply_to_post_number=r[19],
        reply_to_username=r[20],
    )
