"""Catch-up poller: questions whose webhook never arrived still get exactly one job.

Discourse does not retry a timed-out delivery, and a Redis without persistence loses its queue on
restart; the bot's own notifications (mentions, replies, PMs) are the durable record of who asked.
For each recent one (bounded look-back) whose post has no ``answers`` row, the poller checks the post
is still addressed to the bot (a ``private_message`` notification says the bot is in the PM: with PMs
off it is still claimed, for the answer path to record it ``denied``, ``pm_disabled``), skips it when
a webhook delivery of it is in flight (dedupe key), and then claims the row and enqueues the job in ONE
transaction: the row is committed only when the message is in the queue, and two pollers racing on
one post cannot both claim it.

The report says where the questions it saw stand, honestly: a row is ``answered`` only in a state
where the member got an answer (posted, abstained, refused); ``held`` rows are re-sent like lost
messages (``answers.claim_stale``) whatever their age; ``not_answered`` counts the policy refusals and
failures, final, each with its reason in ``citebot answers``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
import redis as redis_lib

from worker import answers
from worker.addressing import BotIdentity, confirm_reply_to_bot, decide
from worker.dedupe import first_sighting, forget, question_key
from worker.domain import ForumPost, Notification
from worker.errors import NotFoundError

log = logging.getLogger(__name__)

POLLED_KINDS = frozenset({"mentioned", "replied", "private_message"})
# Addressing outcomes that a PM notification overrides (loop prevention, a hidden or deleted post, do not).
PM_REASONS = frozenset({"not_addressed", "reply_to_post", "private_message", "mention", "reply"})
# States in which the member got an answer (a refusal by the gate is one: a reply was posted).
ANSWERED_STATES = frozenset({"posted", "abstained", "refused"})
ENQUEUED_BY = "poller"


class NotificationSource(Protocol):
    """The part of the forum the poller reads (``DiscourseClient`` satisfies it)."""

    def get_notifications(self, *, offset: int = 0) -> list[Notification]: ...

    def get_post(self, post_id: int) -> ForumPost: ...

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost: ...


Enqueue = Callable[[int, int, int], None]


@dataclass(frozen=True, slots=True)
class PollReport:
    """One pass. Of the recent questions that already had a row: ``answered``, ``not_answered`` (a
    final state without an answer: denied, skipped, failed, held_for_review), ``held`` and
    ``in_progress``; ``resent``: open or held rows sent again."""

    seen: int = 0
    too_old: int = 0
    answered: int = 0
    not_answered: int = 0
    held: int = 0
    in_progress: int = 0
    resent: int = 0
    in_flight: int = 0
    not_addressed: int = 0
    enqueued: int = 0


def poll_once(
    forum: NotificationSource,
    conn: psycopg.Connection[Any],
    redis: redis_lib.Redis,
    enqueue: Enqueue,
    *,
    bot: BotIdentity,
    namespace: str,
    lookback_s: int,
    dedupe_ttl_s: int,
    stale_after_s: float,
    now: datetime | None = None,
) -> PollReport:
    """One pass over the bot's notifications; returns what it did."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=lookback_s)
    kinds = POLLED_KINDS
    candidates: dict[int, Notification] = {}
    too_old = 0
    notes = _recent_notifications(forum, cutoff)
    for note in notes:
        if note.kind not in kinds or note.post_id is None:
            continue
        if _parse_time(note.created_at) < cutoff:
            too_old += 1
            continue
        candidates.setdefault(note.post_id, note)
    have = answers.states_of(conn, candidates.keys())
    conn.commit()
    resent = _resend_stale(conn, enqueue, stale_after_s, lookback_s)
    counts = {"in_flight": 0, "not_addressed": 0, "enqueued": 0}
    for post_id in sorted(candidates.keys() - have.keys()):
        pm = candidates[post_id].kind == "private_message"
        counts[_catch_up(forum, conn, redis, enqueue, post_id, bot, namespace, dedupe_ttl_s, pm=pm)] += 1
    states = list(have.values())
    report = PollReport(
        seen=len(notes),
        too_old=too_old,
        answered=sum(s in ANSWERED_STATES for s in states),
        not_answered=sum(s in answers.UNANSWERED_STATES and s != "held" for s in states),
        held=states.count("held"),
        in_progress=sum(s not in answers.FINAL_STATES and s != "held" for s in states),
        resent=resent,
        **counts,
    )
    if report.enqueued:
        log.info("poller enqueued %d missed question(s)", report.enqueued)
    return report


# Pages read back per pass at most (60 notifications each): a bound on one pass, not on the look-back.
MAX_PAGES = 20


def _recent_notifications(forum: NotificationSource, cutoff: datetime) -> list[Notification]:
    """Notifications newer than ``cutoff``, paging back, so a poller that was down for a while (or a
    burst of more than one page) still finds every question of the look-back."""
    notes: list[Notification] = []
    for _ in range(MAX_PAGES):
        page = forum.get_notifications(offset=len(notes))
        notes.extend(page)
        if not page or _parse_time(page[-1].created_at) < cutoff:
            break
    return notes


def _resend_stale(
    conn: psycopg.Connection[Any], enqueue: Enqueue, older_than_s: float, lookback_s: int
) -> int:
    """Send again every recent open question whose row has not moved for ``older_than_s``.

    Rows come from ``answers`` itself, not from the notification page just read, so a question whose
    message was lost is found however many notifications have arrived since.
    """
    sent = 0
    with conn.transaction():
        for post_id, topic_id, version in answers.claim_stale(conn, older_than_s, lookback_s):
            enqueue(post_id, topic_id, version)
            sent += 1
    if sent:
        log.warning("poller re-sent %d question(s) whose message was lost", sent)
    return sent


def _catch_up(
    forum: NotificationSource,
    conn: psycopg.Connection[Any],
    redis: redis_lib.Redis,
    enqueue: Enqueue,
    post_id: int,
    bot: BotIdentity,
    namespace: str,
    ttl: int,
    *,
    pm: bool = False,
) -> str:
    """``pm``: a ``private_message`` notification, which is the proof that the bot is in the PM (the
    post's JSON carries no archetype: PostSerializer); loop prevention still applies."""
    try:
        post = forum.get_post(post_id)
    except NotFoundError:
        return "not_addressed"
    decision = decide(post, bot)
    in_pm = pm and decision.reason in PM_REASONS
    if in_pm:
        pass  # the notification says the bot is in the PM: the answer path decides
    elif decision.needs_confirmation and post.reply_to_post_number is not None:
        if not confirm_reply_to_bot(conn, forum, post.topic_id, post.reply_to_post_number, bot):
            return "not_addressed"
    elif not decision.addressed:
        return "not_addressed"
    key = question_key(namespace, post.id, post.version)
    if not first_sighting(redis, key, ttl):
        return "in_flight"
    try:
        with conn.transaction():
            claimed = answers.claim(
                conn, post.id, post.topic_id, post.post_number, post.version, post.user_id,
                post.username, ENQUEUED_BY,
            )  # fmt: skip
            if not claimed:
                return "in_flight"
            enqueue(post.id, post.topic_id, post.version)
    except BaseException:
        forget(redis, key)
        raise
    return "enqueued"


def _parse_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
