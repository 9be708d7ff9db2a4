"""The dramatiq broker, built from settings (never at import time, never a silent localhost default)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import redis as redis_lib
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from worker.errors import ServiceUnavailableError
from worker.settings import RedisSettings

# Messages older than this are dropped: a reply to a day-old question is noise, and the catch-up
# poller (bounded look-back) is the recovery path for anything older.
MAX_MESSAGE_AGE_MS = 6 * 3600 * 1000
# A job may block on the LLM for a while; TimeLimit cannot interrupt a blocking call anyway, so
# it is a backstop, and every client has its own timeout.
JOB_TIME_LIMIT_MS = 10 * 60 * 1000


class CitebotRedisBroker(RedisBroker):
    """dramatiq's Redis broker, whose enqueues can share one Redis round trip (:meth:`pipelined`).

    The webhook enqueues two messages per question delivery (refresh the post, answer it); each
    ``send`` is a round trip, and on a loaded 2-core machine the round trips' system calls are most of
    a delivery's cost (docs/performance.md). Inside ``pipelined()`` the enqueue commands are the ones
    dramatiq sends (its ``dispatch`` script, the same arguments as ``RedisBroker._dispatch``), queued on
    one pipeline and sent when the block ends. dramatiq is pinned (constraints.txt) and
    tests/worker/test_broker.py consumes such messages with a real dramatiq ``Worker``.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)  # type: ignore[no-untyped-call]
        self._pending: ContextVar[redis_lib.client.Pipeline | None] = ContextVar(
            f"citebot_pipeline_{id(self)}", default=None
        )

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """Enqueues made in the block are sent together when it ends; none are sent if it raises."""
        if self._pending.get() is not None:  # nested: the outer block sends them
            yield
            return
        pipe = self.client.pipeline(transaction=False)
        token = self._pending.set(pipe)
        try:
            yield
        finally:
            self._pending.reset(token)
        if len(pipe):
            self._execute(pipe)

    def _execute(self, pipe: redis_lib.client.Pipeline) -> None:
        commands = list(pipe.command_stack)  # execute() empties the stack, even when it raises
        try:
            pipe.execute()
        except redis_lib.exceptions.NoScriptError:
            # Redis lost its script cache (restart, SCRIPT FLUSH): load it and send the batch again
            # (nothing of it was enqueued: every command of the batch is the missing script).
            dispatch = self.scripts["dispatch"]
            dispatch.sha = self.client.script_load(dispatch.script)
            retry = self.client.pipeline(transaction=False)
            for args, options in commands:
                retry.execute_command(args[0], dispatch.sha, *args[2:], **options)
            retry.execute()

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> Any:
        pipe = self._pending.get()
        if pipe is None:
            return self._dispatch("enqueue")(queue_name, message_id, data)  # type: ignore[no-untyped-call]
        args = [
            "enqueue",
            current_millis(),
            queue_name,
            self.broker_id,
            self.heartbeat_timeout,
            self.dead_message_ttl,
            self._should_do_maintenance("enqueue"),
            self._max_unpack_size(),  # type: ignore[no-untyped-call]
            message_id,
            data,
        ]
        # evalsha directly: the script object's own call would make the pipeline check (a round trip)
        # that the script is loaded before every batch.
        return pipe.evalsha(self.scripts["dispatch"].sha, 1, self.namespace, *args)


def build_broker(redis: RedisSettings) -> CitebotRedisBroker:
    """A Redis broker. The retry budget is not here but in each actor's options (``worker.actors``),
    the one place it is set; ``CurrentMessage`` lets an actor body know which attempt it is."""
    middleware = [
        AgeLimit(max_age=MAX_MESSAGE_AGE_MS),
        TimeLimit(time_limit=JOB_TIME_LIMIT_MS),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(),
        CurrentMessage(),
    ]
    return CitebotRedisBroker(
        url=redis.url,
        namespace=f"{redis.namespace}-tasks",
        middleware=middleware,
        # A killed worker's unacked messages come back after the heartbeat timeout, at the next
        # maintenance pass (74–245 s seen with the defaults; docs/reliability.md).
        heartbeat_timeout=redis.heartbeat_timeout_ms,
        maintenance_chance=redis.maintenance_chance,
    )


def check_redis(redis: RedisSettings, *, timeout_s: float = 3.0) -> None:
    """PING Redis once; raise a one-line error naming the URL's host (no password) and the next step."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis.url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except redis_lib.RedisError as exc:
        kwargs = client.connection_pool.connection_kwargs
        where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', 6379)}"
        text = str(exc).strip().rstrip(".")
        reason = text.rsplit(". ", 1)[-1].lower() if text else type(exc).__name__
        raise ServiceUnavailableError(
            f"Redis is not reachable on {where} ({reason}): start it, or fix CITEBOT_REDIS__URL",
            service="redis",
        ) from exc
    finally:
        client.close()
