"""PostgreSQL storage of the local forum, in its own ``forum`` schema of the database it is given."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from eval.stack.forum.guardian import Category, User
from eval.stack.forum.site_settings import default_settings, matches

__all__ = ["Category", "ForumStore", "Row", "User", "as_iso"]

Row = dict[str, Any]

_POST_COLUMNS = (
    "p.id, p.topic_id, p.post_number, p.user_id, p.username, p.raw, p.cooked, p.plain, p.post_type,"
    " p.reply_to_post_number, p.version, p.hidden, p.hidden_at, p.hidden_reason_id, p.action_code,"
    " p.deleted_at, p.user_deleted, p.accepted_answer, p.like_count,"
    " p.created_at, p.updated_at, t.title AS topic_title, t.slug AS topic_slug, t.category_id,"
    " t.archetype AS topic_archetype, ru.username AS reply_to_username, ru.user_id AS reply_to_user_id,"
    " COALESCE(au.admin, false) AS user_admin, COALESCE(au.moderator, false) AS user_moderator,"
    " COALESCE(au.trust_level, 0) AS user_trust_level, au.suspended_till AS user_suspended_till,"
    " pc.slug AS category_slug"
)
_POST_FROM = (
    "forum.posts p JOIN forum.topics t ON t.id = p.topic_id"
    " LEFT JOIN forum.posts ru ON ru.topic_id = p.topic_id AND ru.post_number = p.reply_to_post_number"
    " LEFT JOIN forum.users au ON au.id = p.user_id"
    " LEFT JOIN forum.categories pc ON pc.id = t.category_id"
)
_USER_COLUMNS = (
    "id, username, admin, moderator, trust_level, groups, silenced_till, suspended_till, staged, anonymized,"
    " sidebar_category_ids"
)
# The fields of POST /__forum/users a test may set, with their column.
USER_FIELDS = (
    "admin", "moderator", "trust_level", "groups", "silenced_till", "suspended_till", "staged",
    "sidebar_category_ids",
)  # fmt: skip


def user_from(row: Row) -> User:
    sidebar = row.get("sidebar_category_ids")
    return User(
        id=int(row["id"]),
        username=str(row["username"]),
        admin=bool(row["admin"]),
        moderator=bool(row.get("moderator")),
        trust_level=int(row["trust_level"]) if row.get("trust_level") is not None else 1,
        groups=tuple(row.get("groups") or ()),
        silenced_till=row.get("silenced_till"),
        suspended_till=row.get("suspended_till"),
        staged=bool(row.get("staged")),
        anonymized=bool(row.get("anonymized")),
        sidebar_category_ids=None if sidebar is None else tuple(int(c) for c in sidebar),
    )


def category_from(row: Row) -> Category:
    return Category(
        id=int(row["id"]),
        name=str(row["name"]),
        slug=str(row["slug"]),
        parent_category_id=row["parent_category_id"],
        read_restricted=bool(row["read_restricted"]),
        permissions={str(k): int(v) for k, v in (row["permissions"] or {}).items()},
        description=row["description"],
        color=str(row["color"]),
        text_color=str(row["text_color"]),
        position=int(row["position"]),
    )


class ForumStore:
    """Thread-safe access to the ``forum`` schema through a small connection pool."""

    def __init__(self, database_url: str, *, pool_size: int = 8, connect_timeout_s: float = 10.0) -> None:
        self.database_url = database_url
        self.pool = ConnectionPool(
            database_url, min_size=1, max_size=pool_size, kwargs={"row_factory": dict_row}, open=False
        )
        # Fail fast (psycopg_pool.PoolTimeout) when the database cannot be reached.
        self.pool.open(wait=True, timeout=connect_timeout_s)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Row]]:
        with self.pool.connection() as conn:
            yield conn  # type: ignore[misc]

    def init_schema(self, *, reset: bool = False) -> None:
        ddl = resources.files("eval.stack.forum").joinpath("schema.sql").read_text(encoding="utf-8")
        with self.connection() as conn:
            if reset:
                conn.execute("DROP SCHEMA IF EXISTS forum CASCADE")
            conn.execute(ddl)
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO forum.site_settings"
                    " (name, type, value, default_value, category, plugin, description)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE"
                    " SET category = EXCLUDED.category, plugin = EXCLUDED.plugin",
                    [(n, t, d, d, c, p, desc) for n, t, d, c, p, desc in default_settings()],
                )

    def meta(self) -> Row | None:
        with self.connection() as conn:
            return conn.execute("SELECT export, topics, posts, loaded_at FROM forum.meta").fetchone()

    # -- users -----------------------------------------------------------------------------------

    def user(self, username: str) -> User | None:
        with self.connection() as conn:
            row = conn.execute(
                f"SELECT {_USER_COLUMNS} FROM forum.users WHERE lower(username) = lower(%s)",  # noqa: S608
                (username,),
            ).fetchone()
        return user_from(row) if row else None

    def user_by_id(self, user_id: int) -> User | None:
        with self.connection() as conn:
            row = conn.execute(
                f"SELECT {_USER_COLUMNS} FROM forum.users WHERE id = %s",  # noqa: S608
                (user_id,),
            ).fetchone()
        return user_from(row) if row else None

    def ensure_user(self, username: str, *, admin: bool = False, user_id: int | None = None) -> User:
        """The user named ``username``, created (with the next id, or ``user_id``) if missing."""
        with self.connection() as conn:
            row = conn.execute(
                "INSERT INTO forum.users (id, username, admin)"  # noqa: S608 - a fixed column list
                " VALUES (COALESCE(%s, nextval('forum.user_ids')), %s, %s)"
                " ON CONFLICT (lower(username)) DO UPDATE SET admin = forum.users.admin OR EXCLUDED.admin"
                f" RETURNING {_USER_COLUMNS}",
                (user_id, username, admin),
            ).fetchone()
        if row is None:  # pragma: no cover - RETURNING always yields a row
            raise RuntimeError("insert returned nothing")
        return user_from(row)

    def update_user(self, user_id: int, values: dict[str, Any]) -> User:
        """Set the given ``USER_FIELDS`` of a user (the test control's member editor)."""
        cols = [k for k in values if k in USER_FIELDS]
        with self.connection() as conn:
            if cols:
                assignments = ", ".join(f"{c} = %s" for c in cols)
                conn.execute(
                    f"UPDATE forum.users SET {assignments} WHERE id = %s",  # noqa: S608
                    [*(values[c] for c in cols), user_id],
                )
            self._ensure_groups(conn, values.get("groups") or ())
            row = conn.execute(
                f"SELECT {_USER_COLUMNS} FROM forum.users WHERE id = %s",  # noqa: S608
                (user_id,),
            ).fetchone()
        if row is None:
            raise LookupError(f"user {user_id} not found")
        return user_from(row)

    def _ensure_groups(self, conn: psycopg.Connection[Row], names: Sequence[str]) -> None:
        for name in names:
            conn.execute(
                "INSERT INTO forum.groups (id, name) VALUES (nextval('forum.group_ids'), lower(%s))"
                " ON CONFLICT (name) DO NOTHING",
                (name,),
            )

    def group_ids(self, names: Sequence[str]) -> dict[str, int]:
        """Ids of custom groups by (lower-case) name."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT id, name FROM forum.groups WHERE name = ANY(%s)", ([n.lower() for n in names],)
            ).fetchall()
        return {str(r["name"]): int(r["id"]) for r in rows}

    # -- categories ------------------------------------------------------------------------------

    def categories(self) -> dict[int, Category]:
        with self.connection() as conn:
            rows = conn.execute("SELECT * FROM forum.categories ORDER BY position, id").fetchall()
        return {int(r["id"]): category_from(r) for r in rows}

    def seed_categories(self, seeds: Sequence[Category]) -> None:
        """Write the configured categories (the configuration wins at start-up), then give every category a
        topic names a row: ``Category <id>``, public, as before this table existed."""
        with self.connection() as conn, conn.transaction():
            for c in seeds:
                self._write_category(conn, c)
                self._ensure_groups(conn, list(c.permissions))
            self.ensure_topic_categories(conn)

    def ensure_topic_categories(self, conn: psycopg.Connection[Row]) -> None:
        conn.execute(
            "INSERT INTO forum.categories (id, name, slug)"
            " SELECT DISTINCT t.category_id, 'Category ' || t.category_id, 'category-' || t.category_id"
            " FROM forum.topics t WHERE t.category_id IS NOT NULL ON CONFLICT (id) DO NOTHING"
        )
        conn.execute(
            "SELECT setval('forum.category_ids', GREATEST((SELECT max(id) FROM forum.categories), 999))"
        )

    def _write_category(self, conn: psycopg.Connection[Row], c: Category) -> None:
        conn.execute(
            "INSERT INTO forum.categories (id, name, slug, parent_category_id, read_restricted, permissions,"
            " description, color, text_color, position) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, slug = EXCLUDED.slug,"
            " parent_category_id = EXCLUDED.parent_category_id, read_restricted = EXCLUDED.read_restricted,"
            " permissions = EXCLUDED.permissions, description = EXCLUDED.description,"
            " color = EXCLUDED.color, text_color = EXCLUDED.text_color, position = EXCLUDED.position",
            (
                c.id, c.name, c.slug, c.parent_category_id, c.read_restricted, Jsonb(dict(c.permissions)),
                c.description, c.color, c.text_color, c.position,
            ),
        )  # fmt: skip

    def save_category(self, c: Category) -> Category:
        with self.connection() as conn, conn.transaction():
            self._write_category(conn, c)
            self._ensure_groups(conn, list(c.permissions))
        return c

    def next_category_id(self) -> int:
        with self.connection() as conn:
            row = conn.execute("SELECT nextval('forum.category_ids') AS id").fetchone()
        if row is None:  # pragma: no cover
            raise RuntimeError("nextval returned nothing")
        return int(row["id"])

    def category_counts(self, category_id: int) -> tuple[int, int]:
        """(topic_count, post_count) of a category's undeleted regular topics."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT count(DISTINCT t.id) AS topics, count(p.id) AS posts FROM forum.topics t"
                " LEFT JOIN forum.posts p ON p.topic_id = t.id AND p.deleted_at IS NULL"
                " WHERE t.category_id = %s AND t.deleted_at IS NULL AND t.archetype = 'regular'",
                (category_id,),
            ).fetchone()
        return (int(row["topics"]), int(row["posts"])) if row else (0, 0)

    # -- topics and posts ------------------------------------------------------------------------

    def topic(self, topic_id: int, conn: psycopg.Connection[Row] | None = None) -> Row | None:
        counts = (
            "(SELECT count(*) FROM forum.posts p WHERE p.topic_id = t.id AND p.deleted_at IS NULL)"
            " AS posts_count,"
            " (SELECT max(post_number) FROM forum.posts p WHERE p.topic_id = t.id) AS highest_post_number"
        )
        sql = f"SELECT t.*, {counts} FROM forum.topics t WHERE t.id = %s"  # noqa: S608
        if conn is not None:
            return conn.execute(sql, (topic_id,)).fetchone()
        with self.connection() as own:
            return own.execute(sql, (topic_id,)).fetchone()

    def topic_posts(
        self, topic_id: int, post_ids: Sequence[int] | None = None, *, deleted_first_post: bool = False
    ) -> list[Row]:
        """Undeleted posts of a topic in stream order (all, or only ``post_ids``), every type: the caller's
        Guardian filters them. ``deleted_first_post`` keeps a deleted first post, as ``TopicView`` does for
        staff (``posts.deleted_at IS NULL OR posts.post_number = 1``)."""
        where = "p.topic_id = %s AND (p.deleted_at IS NULL OR (%s AND p.post_number = 1))"
        params: list[object] = [topic_id, deleted_first_post]
        if post_ids is not None:
            where += " AND p.id = ANY(%s)"
            params.append(list(post_ids))
        with self.connection() as conn:
            return conn.execute(
                f"SELECT {_POST_COLUMNS} FROM {_POST_FROM} WHERE {where} ORDER BY p.post_number",  # noqa: S608
                params,
            ).fetchall()

    def post(self, post_id: int, conn: psycopg.Connection[Row] | None = None) -> Row | None:
        sql = f"SELECT {_POST_COLUMNS} FROM {_POST_FROM} WHERE p.id = %s"  # noqa: S608
        if conn is not None:
            return conn.execute(sql, (post_id,)).fetchone()
        with self.connection() as own:
            return own.execute(sql, (post_id,)).fetchone()

    def latest_posts(
        self, before: int | None, limit: int = 50, *, category_ids: Sequence[int] | None = None
    ) -> list[Row]:
        """``LatestPostsQuery#public_posts``: ``Post.public_posts.visible`` of type regular, newest first,
        in the categories ``category_ids`` (``where(categories: {id: Category.secured(guardian)})``; None:
        every category, an admin's). That condition is on the joined category, so a topic without one is
        left out, for an admin too."""
        with self.connection() as conn:
            return conn.execute(
                f"SELECT {_POST_COLUMNS} FROM {_POST_FROM}"  # noqa: S608
                " WHERE p.deleted_at IS NULL AND NOT p.hidden AND p.post_type = 1 AND t.deleted_at IS NULL"
                " AND t.visible AND t.archetype = 'regular' AND (%s::bigint IS NULL OR p.id < %s)"
                " AND t.category_id IS NOT NULL AND (%s::bigint[] IS NULL OR t.category_id = ANY(%s))"
                " ORDER BY p.id DESC LIMIT %s",
                (before, before, category_ids, category_ids, limit),
            ).fetchall()

    def category_ids(self) -> list[int]:
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT category_id FROM forum.topics WHERE category_id IS NOT NULL ORDER BY 1"
            ).fetchall()
        return [int(r["category_id"]) for r in rows]

    def recent_identical(self, user_id: int, topic_id: int | None, raw: str, within_s: float) -> int | None:
        """A post by ``user_id`` with this exact ``raw`` created within ``within_s`` (Discourse's dedupe)."""
        with self.connection() as conn:
            row = conn.execute(
                "SELECT id FROM forum.posts WHERE user_id = %s AND raw = %s"
                " AND (%s::bigint IS NULL OR topic_id = %s)"
                " AND created_at > now() - make_interval(secs => %s) ORDER BY id LIMIT 1",
                (user_id, raw, topic_id, topic_id, within_s),
            ).fetchone()
        return int(row["id"]) if row else None

    def create_topic(
        self, conn: psycopg.Connection[Row], user: User, title: str, slug: str, category_id: int | None,
        archetype: str, allowed_user_ids: Sequence[int],
    ) -> int:  # fmt: skip
        row = conn.execute(
            "INSERT INTO forum.topics (id, title, slug, category_id, archetype, user_id, allowed_user_ids)"
            " VALUES (nextval('forum.topic_ids'), %s, %s, %s, %s, %s, %s) RETURNING id",
            (title, slug, category_id, archetype, user.id, list(allowed_user_ids)),
        ).fetchone()
        if row is None:  # pragma: no cover - RETURNING always yields a row
            raise RuntimeError("insert returned nothing")
        return int(row["id"])

    def insert_post(
        self, conn: psycopg.Connection[Row], user: User, topic_id: int, raw: str, cooked: str, plain: str,
        reply_to_post_number: int | None, *, post_type: int = 1, action_code: str | None = None,
    ) -> int:  # fmt: skip
        """Insert the next post of ``topic_id`` (the topic row is locked so numbers never collide)."""
        topic = conn.execute(
            "SELECT title, tags FROM forum.topics WHERE id = %s FOR UPDATE", (topic_id,)
        ).fetchone()
        if topic is None:
            raise LookupError(f"topic {topic_id} not found")
        row = conn.execute(
            "INSERT INTO forum.posts (id, topic_id, post_number, user_id, username, raw, cooked, plain,"
            " reply_to_post_number, post_type, action_code, search_data)"
            " SELECT nextval('forum.post_ids'), %s,"
            " COALESCE((SELECT max(post_number) FROM forum.posts WHERE topic_id = %s), 0) + 1,"
            " %s, %s, %s, %s, %s, %s, %s, %s,"
            " setweight(to_tsvector('english', %s), 'A') || setweight(to_tsvector('english', %s), 'C')"
            " || setweight(to_tsvector('english', %s), 'D')"
            " RETURNING id",
            (
                topic_id, topic_id, user.id, user.username, raw, cooked, plain, reply_to_post_number,
                post_type, action_code, topic["title"], " ".join(topic["tags"] or []), plain,
            ),
        ).fetchone()  # fmt: skip
        if row is None:  # pragma: no cover - RETURNING always yields a row
            raise RuntimeError("insert returned nothing")
        return int(row["id"])

    def edit_post(self, post_id: int, raw: str, cooked: str, plain: str) -> None:
        """New raw text: a new version, a fresh search vector."""
        with self.connection() as conn:
            conn.execute(
                "UPDATE forum.posts p SET raw = %s, cooked = %s, plain = %s, version = p.version + 1,"
                " updated_at = now(), search_data = setweight(to_tsvector('english', t.title), 'A')"
                " || setweight(to_tsvector('english', array_to_string(t.tags, ' ')), 'C')"
                " || setweight(to_tsvector('english', %s), 'D')"
                " FROM forum.topics t WHERE t.id = p.topic_id AND p.id = %s",
                (raw, cooked, plain, plain, post_id),
            )

    def set_topic_deleted(self, topic_id: int, deleted: bool) -> None:
        with self.connection() as conn:
            conn.execute(
                "UPDATE forum.topics SET deleted_at = CASE WHEN %s THEN now() END WHERE id = %s",
                (deleted, topic_id),
            )

    def post_by_number(self, topic_id: int, post_number: int) -> Row | None:
        with self.connection() as conn:
            return conn.execute(
                f"SELECT {_POST_COLUMNS} FROM {_POST_FROM}"  # noqa: S608
                " WHERE p.topic_id = %s AND p.post_number = %s",
                (topic_id, post_number),
            ).fetchone()

    def set_deleted(self, post_id: int, deleted: bool) -> None:
        with self.connection() as conn:
            conn.execute(
                "UPDATE forum.posts SET deleted_at = CASE WHEN %s THEN now() END, updated_at = now()"
                " WHERE id = %s",
                (deleted, post_id),
            )

    def add_notification(
        self, conn: psycopg.Connection[Row], user_id: int, kind: int, post: Row, actor: User
    ) -> None:
        data = {
            "topic_title": post["topic_title"],
            "original_post_id": post["id"],
            "original_post_type": post["post_type"],
            "original_username": actor.username,
            "revision_number": None,
            "display_username": actor.username,
        }
        conn.execute(
            "INSERT INTO forum.notifications"
            " (user_id, notification_type, topic_id, post_number, post_id, data)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (
                user_id,
                kind,
                post["topic_id"],
                post["post_number"],
                post["id"],
                Jsonb(data),
            ),
        )

    def notifications(self, user_id: int, limit: int = 60, offset: int = 0) -> list[Row]:
        with self.connection() as conn:
            return conn.execute(
                "SELECT n.*, t.slug FROM forum.notifications n JOIN forum.topics t ON t.id = n.topic_id"
                " WHERE n.user_id = %s ORDER BY n.id DESC LIMIT %s OFFSET %s",
                (user_id, limit, max(0, offset)),
            ).fetchall()

    def users_by_ids(self, ids: Sequence[int]) -> list[Row]:
        with self.connection() as conn:
            return conn.execute(
                "SELECT id, username FROM forum.users WHERE id = ANY(%s) ORDER BY id", (list(ids),)
            ).fetchall()

    def users_by_names(self, conn: psycopg.Connection[Row], names: Sequence[str]) -> list[User]:
        rows = conn.execute(
            f"SELECT {_USER_COLUMNS} FROM forum.users WHERE lower(username) = ANY(%s)",  # noqa: S608
            ([n.lower() for n in names],),
        ).fetchall()
        return [user_from(r) for r in rows]

    # -- site settings ---------------------------------------------------------------------------

    def site_settings(self, *, plugin: str | None = None, categories: Sequence[str] = ()) -> list[Row]:
        """Settings as ``Admin::SiteSettingsController#index`` lists them (only these two filters)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT name, type, value, default_value, category, plugin, description"
                " FROM forum.site_settings ORDER BY name"
            ).fetchall()
        return [r for r in rows if matches(r["plugin"], r["category"], want_plugin=plugin, want=categories)]

    def setting(self, name: str) -> str | None:
        with self.connection() as conn:
            row = conn.execute("SELECT value FROM forum.site_settings WHERE name = %s", (name,)).fetchone()
        return str(row["value"]) if row else None

    def set_site_setting(self, name: str, value: str) -> bool:
        with self.connection() as conn:
            cur = conn.execute("UPDATE forum.site_settings SET value = %s WHERE name = %s", (value, name))
            return cur.rowcount == 1


def as_iso(value: datetime | None) -> str | None:
    """Discourse's timestamp format: ``2024-05-01T10:00:00.000Z``."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
