"""The post index side of the backfill: binary-COPY upserts, the range sweep, checkpoints.

Every batch is written in ONE transaction: COPY (binary) into a session TEMP staging table, one
``INSERT … ON CONFLICT (post_id) DO UPDATE`` into ``post_index``, the deletions, and the checkpoint in
``backfill_state``. A crash therefore leaves either the whole batch with its checkpoint or neither.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg
import psycopg.errors
from numpy.typing import NDArray

from backfill.prepare import PreparedPost
from backfill.rows import parse_ts, rewrite
from backfill.sources import LIVE_FORUM, owner_of
from worker.db.vector_index import drop_vector_indexes

_COLUMNS = (
    "post_id",
    "topic_id",
    "post_number",
    "topic_slug",
    "topic_title",
    "category_id",
    "tags",
    "post_type",
    "reply_to_post_number",
    "username",
    "text",
    "digest",
    "model",
    "embedding",
    "source_updated_at",
    "source",
)
_TYPES = (
    "int8",
    "int8",
    "int4",
    "text",
    "text",
    "int8",
    "text[]",
    "int2",
    "int4",
    "text",
    "text",
    "bytea",
    "text",
    # The halfvecs go out already in pgvector's binary form (``pack_halfvecs``). A binary COPY carries
    # no type per field, so the server reads these bytes with halfvec's own receive function; naming
    # them bytea here lets psycopg pass them through in C instead of calling pgvector's Python dumper
    # once per row.
    "bytea",
    "timestamptz",
    "text",
)
_COLS = ", ".join(_COLUMNS)
_UPDATES = ", ".join(f"{c} = EXCLUDED.{c}" for c in _COLUMNS if c != "post_id")
# A row written meanwhile from a newer version of the post (a webhook update) is never overwritten.
_ON_CONFLICT = (
    f"ON CONFLICT (post_id) DO UPDATE SET {_UPDATES}, updated_at = now() "
    "WHERE post_index.source_updated_at IS NULL OR EXCLUDED.source_updated_at IS NULL "
    "OR EXCLUDED.source_updated_at >= post_index.source_updated_at"
)
# Both statements are built from the constants above only.
_UPSERT = f"INSERT INTO post_index ({_COLS}) SELECT {_COLS} FROM backfill_stage {_ON_CONFLICT}"  # noqa: S608
_VALUES = ", ".join("%s::halfvec" if c == "embedding" else "%s" for c in _COLUMNS)
_INSERT_ROW = f"INSERT INTO post_index ({_COLS}) VALUES ({_VALUES}) {_ON_CONFLICT}"  # noqa: S608


def pack_halfvecs(vectors: NDArray[np.floating]) -> list[bytes]:
    """Rows of a (n, d) array in pgvector's binary halfvec form (``halfvec_recv``): uint16 dim, uint16
    unused, n × float16 big-endian. For a binary COPY field the server reads as ``halfvec``."""
    _n, dim = vectors.shape
    header = int(dim).to_bytes(2, "big") + b"\0\0"
    big = np.ascontiguousarray(vectors, dtype=">f2")
    return [header + row.tobytes() for row in big]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    cursor: int | None
    status: str
    stats: dict[str, float]
    saved: dict[str, object] = field(default_factory=dict)  # the whole cursor (a source's watermark)


class IndexStore:
    """Reads and writes ``post_index`` and ``backfill_state`` over one (non-autocommit) connection."""

    def __init__(self, conn: psycopg.Connection, model: str) -> None:
        self.conn = conn
        self.model = model
        self._staged = False

    def write_batch(
        self,
        posts: Sequence[PreparedPost],
        vectors: NDArray[np.floating] | None,
        *,
        lo: int,
        hi: int,
        keep: Iterable[int],
        source_key: str,
        cursor: int | None,
        stats: Mapping[str, float] | Callable[[], Mapping[str, float]],
        fresh: bool = False,
        prune: bool = False,
        rewritten: Sequence[PreparedPost] = (),
        walk: Mapping[str, int] | None = None,
    ) -> int:
        """Upsert embedded posts, delete what the range no longer holds, checkpoint; return rows removed.

        The source owns every post it read (``owner_of(source_key)``, also for unchanged posts), and the
        sweep removes only the rows it owns; ``prune`` removes any row of the range the source lacks.

        ``fresh``: the index held nothing in [lo, hi] when the page was read, so the rows are COPied
        straight into ``post_index`` (half the writes of staging + upsert); should a webhook have
        indexed one of them meanwhile, the unique violation sends the page through the staging path.

        ``rewritten``: rows whose text is unchanged but whose other columns are not (``backfill.rows``),
        rewritten in the same transaction, with no vector.

        ``walk``: the source's watermark (``backfill.sources.Watermarked``), saved with the checkpoint.

        ``stats`` may be a function: it is called inside the transaction, after the rows are written and
        just before the checkpoint, and may wait there (``backfill.run`` writes pages on two connections
        at once and commits them in source order: a page waits for the one before it to commit).
        """
        keep_ids = sorted(set(keep))
        owner = owner_of(source_key)
        if posts:
            self._ensure_stage()
        with self.conn.transaction():
            # Asynchronous commit: the writer does not wait for the WAL flush of each page's few MB
            # before it starts the next page's COPY. Only a crash of the database server itself can
            # lose the last pages acknowledged (at most ~3 wal_writer_delay, 600 ms by default), and
            # with them their checkpoint, as they commit together: the resumed run reads them again.
            self.conn.execute("SET LOCAL synchronous_commit = off")
            if posts:
                if vectors is None or len(vectors) != len(posts):
                    raise ValueError("one vector per post is required")
                direct = fresh
                if direct:
                    try:
                        with self.conn.transaction():  # a savepoint
                            self._copy(posts, vectors, "post_index", owner)
                    except psycopg.errors.UniqueViolation:
                        direct = False
                if not direct:
                    self._copy(posts, vectors, "backfill_stage", owner)
                    self.conn.execute(_UPSERT)
            rewrite(self.conn, rewritten)
            self.conn.execute(
                "UPDATE post_index SET source = %s WHERE post_id = ANY(%s::bigint[]) AND source <> %s",
                (owner, keep_ids, owner),
            )
            cur = self.conn.execute(
                "DELETE FROM post_index WHERE post_id BETWEEN %s AND %s AND post_id <> ALL(%s::bigint[])"
                " AND (%s OR source = %s)",
                (lo, hi, keep_ids, prune, owner),
            )
            removed = cur.rowcount
            counts = stats() if callable(stats) else stats
            if cursor is not None:
                done = {**counts, "removed": counts["removed"] + removed}
                self._checkpoint(source_key, cursor, "running", done, walk)
        return removed

    def _ensure_stage(self) -> None:
        # A session TEMP table: private to this connection, never WAL-logged, emptied at each commit.
        if not self._staged:
            with self.conn.transaction():
                self.conn.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS backfill_stage (LIKE post_index INCLUDING DEFAULTS) "
                    "ON COMMIT DELETE ROWS"
                )
            self._staged = True

    def _copy(
        self, posts: Sequence[PreparedPost], vectors: NDArray[np.floating], table: str, owner: str
    ) -> None:
        packed = pack_halfvecs(vectors)
        model = self.model
        if table not in ("post_index", "backfill_stage"):
            raise ValueError(table)
        with self.conn.cursor().copy(f"COPY {table} ({_COLS}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_TYPES)
            for prepared, vec in zip(posts, packed, strict=True):
                p = prepared.post
                copy.write_row(
                    (
                        p.post_id,
                        p.topic_id,
                        p.post_number,
                        p.topic_slug,
                        p.topic_title,
                        p.category_id,
                        list(p.tags),
                        p.post_type,
                        p.reply_to_post_number,
                        p.username,
                        prepared.text,
                        prepared.digest,
                        model,
                        vec,
                        parse_ts(p.updated_at),
                        owner,
                    )
                )

    def upsert_rows(self, posts: Sequence[PreparedPost], vectors: NDArray[np.floating]) -> int:
        """Upsert a few rows with plain INSERTs (the incremental path, whose rows the live forum owns)."""
        if not posts:
            return 0
        params = []
        for prepared, vec in zip(posts, vectors, strict=True):
            p = prepared.post
            literal = "[" + ",".join(repr(float(x)) for x in vec) + "]"
            params.append(
                (
                    p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.category_id,
                    list(p.tags), p.post_type, p.reply_to_post_number, p.username, prepared.text,
                    prepared.digest, self.model, literal, parse_ts(p.updated_at), LIVE_FORUM,
                )
            )  # fmt: skip
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(_INSERT_ROW, params)
        return len(params)

    def topic_of(self, post_id: int) -> int | None:
        """The topic of an indexed post, or None when the post is not indexed."""
        with self.conn.transaction():
            row = self.conn.execute(
                "SELECT topic_id FROM post_index WHERE post_id = %s", (post_id,)
            ).fetchone()
        return int(row[0]) if row else None

    def topic_post_ids(self, topic_id: int) -> set[int]:
        """The indexed posts recorded under ``topic_id``."""
        with self.conn.transaction():
            rows = self.conn.execute("SELECT post_id FROM post_index WHERE topic_id = %s", (topic_id,))
            return {int(r[0]) for r in rows.fetchall()}

    def delete_topic_except(self, topic_id: int, keep: Iterable[int]) -> int:
        """Remove the topic's indexed posts that are not in ``keep``."""
        with self.conn.transaction():
            cur = self.conn.execute(
                "DELETE FROM post_index WHERE topic_id = %s AND post_id <> ALL(%s::bigint[])",
                (topic_id, sorted(set(keep))),
            )
        return cur.rowcount

    def delete_posts(self, post_ids: Iterable[int]) -> int:
        ids = sorted(set(post_ids))
        if not ids:
            return 0
        with self.conn.transaction():
            cur = self.conn.execute("DELETE FROM post_index WHERE post_id = ANY(%s::bigint[])", (ids,))
        return cur.rowcount

    # -- checkpoints -------------------------------------------------------------------------------

    def load_checkpoint(self, source_key: str) -> Checkpoint | None:
        with self.conn.transaction():
            row = self.conn.execute(
                "SELECT cursor, status, stats FROM backfill_state WHERE source = %s", (source_key,)
            ).fetchone()
        if row is None:
            return None
        saved = dict(row[0]) if isinstance(row[0], dict) else {}
        cursor = saved.get("post_id")
        stats = {k: float(v) for k, v in (row[2] or {}).items() if isinstance(v, int | float)}
        return Checkpoint(int(cursor) if cursor is not None else None, str(row[1]), stats, saved)

    def start_run(self, source_key: str, *, fresh: bool) -> None:
        with self.conn.transaction():
            self.conn.execute(
                """INSERT INTO backfill_state (source, cursor, status, model, stats, started_at, updated_at)
                   VALUES (%s, '{}', 'running', %s, '{}', now(), now())
                   ON CONFLICT (source) DO UPDATE SET status = 'running', model = EXCLUDED.model,
                       finished_at = NULL, updated_at = now(),
                       cursor = CASE WHEN %s THEN backfill_state.cursor - 'post_id' - 'top'
                                ELSE backfill_state.cursor END,
                       stats = CASE WHEN %s THEN '{}'::jsonb ELSE backfill_state.stats END,
                       started_at = CASE WHEN %s THEN now() ELSE backfill_state.started_at END""",
                (source_key, self.model, fresh, fresh, fresh),
            )

    def _checkpoint(
        self,
        source_key: str,
        cursor: int,
        status: str,
        stats: Mapping[str, float],
        walk: Mapping[str, int] | None = None,
    ) -> None:
        self.conn.execute(
            "UPDATE backfill_state SET cursor = %s, status = %s, stats = %s, updated_at = now() "
            "WHERE source = %s",
            (json.dumps({**(walk or {}), "post_id": cursor}), status, json.dumps(dict(stats)), source_key),
        )

    def finish_run(
        self,
        source_key: str,
        status: str,
        summary: Mapping[str, object],
        next_walk: Mapping[str, int] | None = None,
    ) -> None:
        """Record the outcome; ``done`` replaces the cursor by ``next_walk`` (the source's watermark, or
        nothing) so the next run starts a fresh pass from there."""
        with self.conn.transaction():
            self.conn.execute(
                "UPDATE backfill_state SET status = %s, stats = %s, finished_at = now(), updated_at = now(),"
                " cursor = CASE WHEN %s = 'done' THEN %s::jsonb ELSE cursor END WHERE source = %s",
                (status, json.dumps(dict(summary), default=str), status, json.dumps(dict(next_walk or {})),
                 source_key),
            )  # fmt: skip

    # -- size, reindex ------------------------------------------------------------------------------

    def newest_post_id(self) -> int | None:
        """The highest indexed post id (None: the index is empty)."""
        with self.conn.transaction():
            row = self.conn.execute("SELECT max(post_id) FROM post_index").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def count(self) -> int:
        with self.conn.transaction():
            row = self.conn.execute("SELECT count(*) FROM post_index").fetchone()
        return int(row[0]) if row else 0

    def reindex(self, model: str, dimension: int, strategy: str) -> None:
        """Empty the index and give its vector column the new dimension; all checkpoints restart."""
        with self.conn.transaction():
            drop_vector_indexes(self.conn)
            self.conn.execute("TRUNCATE post_index")
            self.conn.execute(f"ALTER TABLE post_index ALTER COLUMN embedding TYPE halfvec({int(dimension)})")
            # A new type takes the type's default storage: keep the vectors inline (migration 0008).
            self.conn.execute("ALTER TABLE post_index ALTER COLUMN embedding SET STORAGE MAIN")
            self.conn.execute(
                "UPDATE index_meta SET model = %s, dimension = %s, strategy = %s, updated_at = now()",
                (model, dimension, strategy),
            )
            self.conn.execute("UPDATE backfill_state SET cursor = '{}', status = 'idle', stats = '{}'")
        self.model = model
        # The staging table was shaped after the old column type.
        with self.conn.transaction():
            self.conn.execute("DROP TABLE IF EXISTS backfill_stage")
        self._staged = False
