"""The ``answers`` table: one row per question post, the unit of exactly-once.

The answerer of the first delivery of a question ``claim``s it (``claim_delivery``: ``INSERT … ON
CONFLICT DO NOTHING``); every later delivery of the same post finds the row and does nothing new. The
row then moves through its states with ``transition``, a conditional UPDATE, so two workers holding
the same message cannot both move it:
``queued → retrieved → generated → posted | abstained | refused | failed`` (``skipped`` for rate limits,
``held_for_review`` when Discourse queued the reply for a moderator instead of posting it, ``denied``
when a policy says no, straight from ``queued`` or, with a refusal notice to post, through
``generated``). ``held`` is open: the flags could not be read yet, so nothing was decided; the question
goes back to ``queued`` once they can be.

Every question a member asked that has no answer carries a ``reason`` (``REASONS``): the state says
what happened, the reason why, in words an admin can filter on (``citebot answers --reason``) and the
metric ``citebot_unanswered_total{state, reason}`` counts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal, get_args

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from worker.domain import Delivery
from worker.metrics import UNANSWERED
from worker.question import EarlierAnswer

AnswerState = Literal[
    "queued", "retrieved", "generated", "posted", "abstained", "refused", "failed", "skipped",
    "held_for_review", "denied", "held",
]  # fmt: skip
STATES: tuple[AnswerState, ...] = get_args(AnswerState)
FINAL_STATES: frozenset[AnswerState] = frozenset(
    {"posted", "abstained", "refused", "failed", "skipped", "held_for_review", "denied"}
)

# The states of a question that got no answer (``held`` is one until the flags can be read).
UNANSWERED_STATES: frozenset[AnswerState] = frozenset(
    {"held", "denied", "skipped", "failed", "held_for_review"}
)
# Why not, by state. ``denied`` also takes ``summon.<reason>`` (worker.summon.Reason) and
# ``limit.<reason>`` (worker.limits: per_user, per_topic).
REASONS: dict[str, str] = {
    "settings_unreadable": "held: the citebot site settings could not be read yet; retried until they can",
    "disabled": "denied: citebot_enabled is off",
    "limit.per_user": "denied: the member asked more than limits.per_user_per_hour questions this hour",
    "limit.per_topic": "denied: the topic had more than limits.per_topic_per_hour questions this hour",
    "summon.*": "denied: the summon policy refused it (worker/summon.py names each reason)",
    "post_gone": "skipped: the question was deleted or hidden before it was answered",
    "transient_error": "failed: a service stayed down through every retry (an apology may be posted)",
    "permanent_error": "failed: an error retrying cannot fix (see the error column)",
    "reply_held_for_review": "held_for_review: Discourse queued the bot's reply for a moderator",
}

# Columns ``transition`` may set besides ``state``; jsonb ones are wrapped for psycopg.
_FIELDS = frozenset(
    {"zone", "rule_id", "sources", "reply_raw", "reply_post_id", "reply_post_number", "trace", "attempts"}
    | {"error", "posted_at", "reason"}
)
_JSON_FIELDS = frozenset({"sources", "trace"})
_COLUMNS = (
    "id, post_id, topic_id, post_number, post_version, user_id, username, state, zone, rule_id, sources,"
    " reply_raw, reply_post_id, trace, attempts, error, enqueued_by, created_at, updated_at, posted_at,"
    " reason"
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
    reason: str | None = None


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


def states_of(conn: psycopg.Connection[Any], post_ids: Collection[int]) -> dict[int, AnswerState]:
    """The state of each of ``post_ids`` that has a row."""
    if not post_ids:
        return {}
    rows = conn.execute(
        "SELECT post_id, state FROM answers WHERE post_id = ANY(%s)", (list(post_ids),)
    ).fetchall()
    return {int(r[0]): r[1] for r in rows}


def claim_stale(
    conn: psycopg.Connection[Any], older_than_s: float, newer_than_s: float, limit: int = 100
) -> list[tuple[int, int, int]]:
    """Open rows (``queued``, ``retrieved``, ``generated``, ``held``) untouched for ``older_than_s``,
    touched now; returns ``(post_id, topic_id, version)`` of each. Rows in flight count only when created
    within ``newer_than_s``; a ``held`` row counts whatever its age, since it waits for the flags, not
    for its message, and must be answered once they can be read.

    Such a row has lost its message (a Redis restart without persistence, a delayed retry gone with
    it, a held question whose retries ran out). The conditional UPDATE marks the rows, so of two pollers
    only one re-sends a given row per period; a message sent twice anyway is harmless, since the
    pipeline locks and checks the state.
    """
    rows = conn.execute(
        "UPDATE answers SET updated_at = now() WHERE post_id IN ("
        " SELECT post_id FROM answers WHERE updated_at < now() - make_interval(secs => %s)"
        " AND (state = 'held' OR (state IN ('queued', 'retrieved', 'generated')"
        " AND created_at > now() - make_interval(secs => %s)))"
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

    The state check is in the WHERE clause, so of two workers racing on one row exactly one wins. A move
    into one of ``UNANSWERED_STATES`` from another state is counted in ``citebot_unanswered_total``
    with the row's reason.
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
    query = sql.SQL(
        "UPDATE answers SET {} WHERE post_id = %s AND state = ANY(%s) RETURNING id, reason"
    ).format(sql.SQL(", ").join(sets))
    row = conn.execute(query, [*values, post_id, list(from_states)]).fetchone()
    if row is None:
        return False
    if to_state in UNANSWERED_STATES and set(from_states) != {to_state}:
        UNANSWERED.labels(to_state, row[1] or "unknown").inc()
    return True


def is_bot_reply(conn: psycopg.Connection[Any], topic_id: int, post_number: int) -> bool:
    """Whether post ``post_number`` of ``topic_id`` is a reply the bot posted (as recorded here)."""
    row = conn.execute(
        "SELECT 1 FROM answers WHERE topic_id = %s AND reply_post_number = %s LIMIT 1",
        (topic_id, post_number),
    ).fetchone()
    return row is not None


def earlier(
    conn: psycopg.Connection[Any],
    topic_id: int,
    post_number: int,
    user_id: int,
    pointed: Collection[int] = (),
) -> EarlierAnswer | None:
    """The bot's earlier answer that a post (``post_number`` by ``user_id``) follows up on: the answer
    posted as one of the ``pointed`` posts (the one the post replies to or quotes), else the member's
    latest answered question in the topic; None when the bot has answered neither."""
    row = conn.execute(
        "SELECT post_id, post_number, reply_post_number, sources, trace FROM answers"
        " WHERE topic_id = %s AND reply_post_number IS NOT NULL AND reply_post_number < %s"
        " AND state IN ('posted', 'abstained') AND (reply_post_number = ANY(%s) OR user_id = %s)"
        " ORDER BY reply_post_number = ANY(%s) DESC, reply_post_number DESC LIMIT 1",
        (topic_id, post_number, list(pointed), user_id, list(pointed)),
    ).fetchone()
    if row is None:
        return None
    return EarlierAnswer(int(row[0]), row[1], row[2], cited_posts(row[3], row[4]))


def cited_posts(sources: Any, trace: Any) -> tuple[int, ...]:
    """The post ids a posted reply cites: of the ``sources`` handed to the model (the row's), those whose
    number the last sanitize stage of the ``trace`` resolved; all of them when the trace does not say."""
    by_n = {
        int(s.get("n") or 0): int(s["post_id"])
        for s in (sources if isinstance(sources, list) else [])
        if isinstance(s, dict) and s.get("post_id")
    }
    stages = trace.get("stages") if isinstance(trace, dict) else None
    sanitized = [s for s in stages or [] if isinstance(s, dict) and s.get("name") == "sanitize"]
    info = sanitized[-1].get("info") if sanitized else None
    numbers = info.get("cited") if isinstance(info, dict) else None
    if not isinstance(numbers, list):
        return tuple(by_n.values())
    return tuple(by_n[n] for n in numbers if isinstance(n, int) and n in by_n)


def cited_by_reply(conn: psycopg.Connection[Any], topic_id: int, post_numbers: Collection[int]) -> set[int]:
    """The post ids that the bot's replies at ``post_numbers`` of ``topic_id`` cited (``cited_posts``)."""
    if not post_numbers:
        return set()
    rows = conn.execute(
        "SELECT sources, trace FROM answers WHERE topic_id = %s AND reply_post_number = ANY(%s)",
        (topic_id, list(post_numbers)),
    ).fetchall()
    return {post_id for sources, trace in rows for post_id in cited_posts(sources, trace)}


def recent(
    conn: psycopg.Connection[Any],
    state: AnswerState | None = None,
    limit: int = 20,
    *,
    reason: str | None = None,
    unanswered: bool = False,
) -> list[Answer]:
    """The latest rows, newest first (``citebot answers``): optionally in one ``state``, with a ``reason``
    (``summon`` matches every ``summon.<reason>``), or only the questions without an answer."""
    clauses = [sql.SQL("TRUE")]
    params: list[object] = []
    if state is not None:
        clauses.append(sql.SQL("state = %s"))
        params.append(state)
    if reason is not None:
        clauses.append(sql.SQL("(reason = %s OR starts_with(reason, %s))"))
        params += [reason, reason + "."]
    if unanswered:
        clauses.append(sql.SQL("state = ANY(%s)"))
        params.append(sorted(UNANSWERED_STATES))
    query = sql.SQL("SELECT {} FROM answers WHERE {} ORDER BY updated_at DESC, id DESC LIMIT %s").format(
        sql.SQL(_COLUMNS), sql.SQL(" AND ").join(clauses)
    )
    cur = conn.execute(query, [*params, int(limit)])
    return [Answer(*row) for row in cur.fetchall()]


def count_by_state(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """How many rows are in each state."""
    rows = conn.execute("SELECT state, count(*) FROM answers GROUP BY state ORDER BY state").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def count_unanswered(conn: psycopg.Connection[Any]) -> dict[tuple[str, str], int]:
    """How many questions have no answer, by ``(state, reason)``."""
    rows = conn.execute(
        "SELECT state, coalesce(reason, 'unknown'), count(*) FROM answers WHERE state = ANY(%s)"
        " GROUP BY 1, 2 ORDER BY 1, 2",
        (sorted(UNANSWERED_STATES),),
    ).fetchall()
    return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}
