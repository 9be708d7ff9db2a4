"""The one module that declares citebot's dramatiq actors.

``declare_actors(broker, runtime)`` registers them on a broker built by the composition root and
returns them in a frozen ``Actors``; nothing here reads the environment or connects at import time.
Actor bodies get the process-wide ``Runtime`` from the ``runtime`` callable, which builds it lazily.

Retry policy (docs/intake.md), set once, in the actors' options (``retry_options``): transient errors
(timeouts, 429, 5xx, a database restarting) retry with exponential backoff capped by
``limits.max_backoff_s``, at most ``limits.max_retries`` times, and a 429's ``Retry-After`` is
honoured; permanent errors (4xx, validation) never retry (``throws``). dramatiq's default of 20 retries
over ~30 days would answer a question a month late. The answerer learns that an attempt is the last one
from dramatiq's own retry count (``is_last_attempt``), not from a counter of its own.

Messages carry ids only. ``answer_question`` is idempotent: the answerer claims the ``answers`` row
(created in state ``queued`` by the first message that sees the post; ``worker/pipeline.py``), and a row
in a final state is never acted on again. This module reads no table of its own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import dramatiq
from dramatiq.middleware import CurrentMessage

from worker.addressing import BotIdentity, confirm_reply_to_bot
from worker.domain import Delivery
from worker.errors import PermanentError, TransientError
from worker.poller import PollReport, poll_once
from worker.redis_batch import RedisCommand
from worker.runtime import Runtime
from worker.settings import LimitsSettings

log = logging.getLogger(__name__)

BACKFILL_TIME_LIMIT_MS = 6 * 3600 * 1000
QUESTIONS_QUEUE = "questions"
INDEX_QUEUE = "index"
MAINTENANCE_QUEUE = "maintenance"
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Actors:
    """The declared actors, by name."""

    answer_question: dramatiq.Actor[Any, None]
    poll_notifications: dramatiq.Actor[Any, None]
    refresh_post: dramatiq.Actor[Any, None]
    refresh_topic: dramatiq.Actor[Any, None]
    backfill_tick: dramatiq.Actor[Any, None]
    refresh_category: dramatiq.Actor[Any, None]
    sync_categories: dramatiq.Actor[Any, None]


def retry_options(limits: LimitsSettings) -> dict[str, Any]:
    """The one retry budget, as dramatiq actor options: permanent errors never, the rest ``max_retries``."""
    return {
        "max_retries": limits.max_retries,
        "min_backoff": int(limits.min_backoff_s * 1000),
        "max_backoff": int(limits.max_backoff_s * 1000),
        "throws": (PermanentError,),
    }


def is_last_attempt(limits: LimitsSettings) -> bool:
    """True in the attempt after which dramatiq retries no more (False outside an actor)."""
    message = CurrentMessage.get_current_message()
    if message is None:
        return False
    return int(message.options.get("retries", 0)) >= int(
        message.options.get("max_retries", limits.max_retries)
    )


def honour_retry_after(limits: LimitsSettings, fn: Callable[[], R]) -> R:
    """Run ``fn``; a transient error that names a wait becomes ``dramatiq.Retry`` with that delay."""
    try:
        return fn()
    except TransientError as exc:
        if exc.retry_after is None:
            raise
        delay_s = min(max(exc.retry_after, limits.min_backoff_s), limits.max_backoff_s)
        raise dramatiq.Retry(str(exc), delay=int(delay_s * 1000)) from exc


def declare_actors(broker: dramatiq.Broker, runtime: Callable[[], Runtime], limits: LimitsSettings) -> Actors:
    """Register every actor on ``broker``; bodies call ``runtime()`` only when a message runs."""
    options: dict[str, Any] = {"broker": broker, **retry_options(limits)}

    @dramatiq.actor(queue_name=QUESTIONS_QUEUE, **options)
    def answer_question(
        post_id: int, topic_id: int, version: int, source: str = "webhook", reply_to: int | None = None
    ) -> None:
        honour_retry_after(
            limits, lambda: handle_question(runtime(), post_id, topic_id, version, source, reply_to)
        )

    def enqueue_from_poll(post_id: int, topic_id: int, version: int) -> None:
        answer_question.send(post_id, topic_id, version, "poller")

    @dramatiq.actor(queue_name=MAINTENANCE_QUEUE, **options)
    def poll_notifications() -> None:
        honour_retry_after(limits, lambda: run_poll(runtime(), enqueue_from_poll))

    @dramatiq.actor(queue_name=INDEX_QUEUE, **options)
    def refresh_post(post_id: int, event: str) -> None:
        honour_retry_after(limits, lambda: runtime().indexer().refresh_post(post_id, event))

    @dramatiq.actor(queue_name=INDEX_QUEUE, **options)
    def refresh_topic(topic_id: int, event: str) -> None:
        honour_retry_after(limits, lambda: runtime().indexer().refresh_topic(topic_id, event))

    @dramatiq.actor(queue_name=INDEX_QUEUE, **options)
    def refresh_category(category_id: int, event: str) -> None:
        honour_retry_after(limits, lambda: runtime().indexer().refresh_category(category_id, event))

    # The forum's categories as it describes them now: sent by every worker process at its start, so that
    # categories created or changed while no worker ran are known before a question needs them.
    @dramatiq.actor(queue_name=MAINTENANCE_QUEUE, **options)
    def sync_categories() -> None:
        line = honour_retry_after(limits, lambda: runtime().indexer().sync_categories())
        log.info("%s", line)

    # A scheduled incremental backfill (`citebot backfill --enqueue` from cron): unchanged posts are
    # skipped by digest, so a tick costs reading the source. Hours, not the default 10-minute limit.
    @dramatiq.actor(queue_name=MAINTENANCE_QUEUE, time_limit=BACKFILL_TIME_LIMIT_MS, **options)
    def backfill_tick(kind: str, path: str | None = None, source_url: str | None = None) -> None:
        line = runtime().indexer().backfill(kind, path=Path(path) if path else None, source_url=source_url)
        log.info("scheduled backfill: %s", line)

    return Actors(
        answer_question,
        poll_notifications,
        refresh_post,
        refresh_topic,
        backfill_tick,
        refresh_category,
        sync_categories,
    )


def enqueue_only() -> Runtime:
    """The ``runtime`` of a process that only sends messages (the webhook app, ``--enqueue``)."""
    raise PermanentError("this process only enqueues; it runs no actor", service="citebot")


def handle_question(
    rt: Runtime, post_id: int, topic_id: int, version: int, source: str, reply_to: int | None = None
) -> None:
    """Hand the delivery to the answerer, which claims the ``answers`` row and acts on it unless final.

    ``reply_to``: the post replies to that post number without naming its author (a quoting reply);
    it is a question only if that post is the bot's (``addressing.confirm_reply_to_bot``)."""
    if reply_to is not None:
        with rt.pool.connection() as conn:
            if not confirm_reply_to_bot(conn, rt.forum, topic_id, reply_to, _bot(rt)):
                log.debug("reply to post #%d is not to the bot", reply_to, extra={"post_id": post_id})
                return
    # One job at a time acts on a question: the answerer (worker/pipeline.py) holds a PostgreSQL
    # advisory lock on the post id for its whole run, released at once if the worker dies.
    if rt.answerer is None:
        # Only `citebot worker run` answers; a process built without a pipeline must not pretend to.
        raise PermanentError("this process has no answer pipeline", service="citebot")
    delivery = Delivery(post_id, topic_id, version, source)
    rt.answerer.answer(delivery, last_attempt=is_last_attempt(rt.settings.limits))


def _bot(rt: Runtime) -> BotIdentity:
    d = rt.settings.discourse
    return BotIdentity(d.bot_username, d.bot_user_id, d.answer_pms)


def run_poll(rt: Runtime, enqueue: Callable[[int, int, int], None]) -> PollReport:
    """One catch-up pass with the runtime's forum, database and Redis."""
    s = rt.settings
    bot = _bot(rt)
    with rt.pool.connection() as conn:
        return poll_once(
            rt.forum.at("background"),
            conn,
            rt.redis,
            enqueue,
            bot=bot,
            namespace=s.redis.namespace,
            lookback_s=s.limits.poll_lookback_s,
            dedupe_ttl_s=s.limits.webhook_dedupe_ttl_s,
            stale_after_s=s.limits.poll_stale_after_s,
        )


class DramatiqIntake:
    """The webhook's ``Intake`` over the declared actors: ids in, messages out."""

    def __init__(self, actors: Actors) -> None:
        self._actors = actors

    def outbox(self) -> AbstractContextManager[list[RedisCommand]]:
        """On ``CitebotRedisBroker`` the messages sent in the block are not sent but yielded as Redis
        commands, for the webhook to send with other deliveries'; any other broker (dramatiq's
        ``RedisBroker`` or ``StubBroker``) sends each at once and yields an empty list."""
        collected = getattr(self._actors.answer_question.broker, "collected", None)
        return collected() if collected is not None else contextlib.nullcontext([])

    def question(self, post_id: int, topic_id: int, version: int, reply_to: int | None = None) -> None:
        if reply_to is None:
            self._actors.answer_question.send(post_id, topic_id, version, "webhook")
        else:
            self._actors.answer_question.send(post_id, topic_id, version, "webhook", reply_to)

    def refresh_post(self, post_id: int, event: str, delay_s: float = 0.0) -> None:
        if delay_s > 0:
            self._actors.refresh_post.send_with_options(args=(post_id, event), delay=int(delay_s * 1000))
        else:
            self._actors.refresh_post.send(post_id, event)

    def refresh_topic(self, topic_id: int, event: str) -> None:
        self._actors.refresh_topic.send(topic_id, event)

    def refresh_category(self, category_id: int, event: str) -> None:
        self._actors.refresh_category.send(category_id, event)
