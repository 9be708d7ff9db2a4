"""The ``answers`` table: one row per question post, the unit of exactly-once.

The answerer of the first delivery of a question ``claim``s it (``claim_delivery``: ``INSERT … ON
CONFLICT DO NOTHING``); every later delivery of the same post finds the row and does nothing new. The
row then moves through its states with ``transition``, a conditional UPDATE, so two workers holding
the same message cannot both move it:
``queued → retrieved → generated → posted | abstained | refused | failed`` (``skipped`` for rate limits,
``held_for_review`` when Discourse queued the reply for a moderator instead of posting it, ``denied``
when the summon policy refuses the question: ``rule_id`` ``summon.<reason>``, straight from ``queued``
or, with a refusal notice to post, through ``generated``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, get_args

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from worker.domain import Delivery

AnswerState = Literal[
    "queued", "retrieved", "generated", "posted", "abstained", "refused", "failed", "skipped",
    "held_for_review", "denied",
]  # fmt: skip
STATES: tuple[AnswerState, ...] = get_args(AnswerState)
FINAL_STATES: frozenset[AnswerState] = frozenset(
    {"posted", "abstained", "refused", "failed", "skipped", "held_for_review", "denied"}
)

# Columns ``transition`` may set besides ``state``; jsonb ones are wrapped for psycopg.
_FIELDS = frozenset(
    {"zone", "rule_id", "sources", "reply_raw", "reply_post_id", "reply_post_number", "trace", "attempts"}
    | {"error", "posted_at"}
)
_JSON_FIELDS = frozenset({"sources", "trace"})
_COLUMNS = (
    "id, post_id, topic_id, post_number, post_version, user_id, username, state, zone, rule_id, sources,"
    " reply_raw, reply_post_id, trace, attempts, error, enqueued_by, created_at, updated_at, posted_at"
)


@dataclass(frozen=True, slots=True)
class Answer:
    """One row of ``answers``."""

    id: int
    post_id: int
    topic_id: int
    post_number: int | None
    post_version: int | None
    user_id: int | None
    username: str | None
    state: AnswerState
    zone: str | None
    rule_id: str | None
    sources: Any
    reply_raw: str | None
    reply_post_id: int | None
    trace: Any
    attempts: int
    error: str | None
    enqueued_by: str | None
    created_at: Any
    updated_at: Any
    posted_at: Any


def claim(
    conn: psycopg.Connection[Any],
    post_id: int,
    topic_id: int,
    post_number: int | None,
    version: int | None,
    user_id: int | None,
    username: str | None,
    enqueued_by: str,
) -> bool:
    """Create the row in state ``queued``; True only for the caller that created it."""
    row = conn.execute(
        "INSERT INTO answers (post_id, topic_id, post_number, post_version, user_id, username, enqueued_by)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (post_id) DO NOTHING RETURNING id",
        (post_id, topic_id, post_number, version, user_id, username, enqueued_by),
    ).fetchone()
    return row is not None


def claim_delivery(conn: psycopg.Connection[Any], delivery: Delivery) -> bool:
    """``claim`` for a queue message (who asked and where are filled in once the post is read)."""
    d = delivery
    return claim(conn, d.post_id, d.topic_id, None, d.version, None, None, d.source)


def get(conn: psycopg.Connection[Any], post_id: int) -> Answer | None:
    """The row of ``post_id``, or None."""
    cur = conn.execute(f"SELECT {_COLUMNS} FROM answers WHERE post_id = %s", (post_id,))  # noqa: S608
    row = cur.fetchone()
    return Answer(*row) if row is not None else None


def existing(conn: psycopg.Connection[Any], post_ids: Collection[int]) -> set[int]:
    """Which of ``post_ids`` already have a row."""
    if not post_ids:
        return set()
    rows = conn.execute("SELECT post_id FROM answers WHERE post_id = ANY(%s)", (list(post_ids),)).fetchall()
    return {int(r[0]) for r in rows}


def claim_stale(
    conn: psycopg.Connection[Any], older_than_s: float, newer_than_s: float, limit: int = 100
) -> list[tuple[int, int, int]]:
    """Open rows (``queued``, ``retrieved``, ``generated``) untouched for ``older_than_s`` but created
    within ``newer_than_s``, touched now; returns ``(post_id, topic_id, version)`` of each.

    Such a row has lost its message (a Redis restart without persistence, a delayed retry gone with
    it). The conditional UPDATE marks the rows, so of two pollers only one re-sends a given row per
    period; a message sent twice anyway is harmless, since the pipeline locks and checks the state.
    """
    rows = conn.execute(
        "UPDATE answers SET updated_at = now() WHERE post_id IN ("
        " SELECT post_id FROM answers WHERE state IN ('queued', 'retrieved', 'generated')"
        " AND updated_at < now() - make_interval(secs => %s)"
        " AND created_at > now() - make_interval(secs => %s)"
        " ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED)"
        " RETURNING post_id, topic_id, coalesce(post_version, 1)",
        (float(older_than_s), float(newer_than_s), int(limit)),
    ).fetchall()
    return sorted((int(r[0]), int(r[1]), int(r[2])) for r in rows)


def record_author(
    conn: psycopg.Connection[Any], post_id: int, user_id: int, username: str, post_number: int
) -> None:
    """Fill in who asked and where, once the post is read (a row claimed from a webhook lacks them)."""
    conn.execute(
        "UPDATE answers SET user_id = %s, username = %s, post_number = %s WHERE post_id = %s",
        (user_id, username, post_number, post_id),
    )


def record_error(conn: psycopg.Connection[Any], post_id: int, error: str) -> None:
    """Note why the last attempt failed, leaving the state as it is (the job will be retried)."""
    conn.execute("UPDATE answers SET error = %s, updated_at = now() WHERE post_id = %s", (error, post_id))


def transition(
    conn: psycopg.Connection[Any],
    post_id: int,
    from_states: Collection[AnswerState],
    to_state: AnswerState,
    **fields: object,
) -> bool:
    """Move the row from one of ``from_states`` to ``to_state``, setting ``fields``; False if not there.

    The state check is in the WHERE clause, so of two workers racing on one row exactly one wins.
    """
    if to_state not in STATES:
        raise ValueError(f"unknown state {to_state!r}")
    bad = set(from_states) - set(STATES)
    if bad or not from_states:
        raise ValueError(f"unknown or empty from_states {sorted(bad)!r}")
    unknown = set(fields) - _FIELDS
    if unknown:
        raise ValueError(f"cannot set {sorted(unknown)!r} on answers")
    sets: list[sql.Composable] = [sql.SQL("state = %s"), sql.SQL("updated_at = now()")]
    values: list[object] = [to_state]
    for name, value in sorted(fields.items()):
        sets.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
        values.append(Jsonb(value) if name in _JSON_FIELDS else value)
    query = sql.SQL("UPDATE answers SET {} WHERE post_id = %s AND state = ANY(%s) RETURNING id").format(
        sql.SQL(", ").join(sets)
    )
    row = conn.execute(query, [*values, post_id, list(from_states)]).fetchone()
    return row is not None


def is_bot_reply(conn: psycopg.Connection[Any], topic_id: int, post_number: int) -> bool:
    """Whether post ``post_number`` of ``topic_id`` is a reply the bot posted (as recorded here)."""
    row = conn.execute(
        "SELECT 1 FROM answers WHERE topic_id = %s AND reply_post_number = %s LIMIT 1",
        (topic_id, post_number),
    ).fetchone()
    return row is not None


def recent(conn: psycopg.Connection[Any], state: AnswerState | None = None, limit: int = 20) -> list[Answer]:
    """The latest rows, newest first, optionally in one state (``citebot answers``)."""
    cur = conn.execute(
        f"SELECT {_COLUMNS} FROM answers WHERE %s::text IS NULL OR state = %s"  # noqa: S608
        " ORDER BY updated_at DESC, id DESC LIMIT %s",
        (state, state, int(limit)),
    )
    return [Answer(*row) for row in cur.fetchall()]


def count_by_state(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """How many rows are in each state."""
    rows = conn.execute("SELECT state, count(*) FROM answers GROUP BY state ORDER BY state").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}
