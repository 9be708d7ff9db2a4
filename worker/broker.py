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
    Middleware,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

from worker.errors import ServiceUnavailableError
from worker.redis_batch import RedisCommand
from worker.settings import RedisSettings

# Messages older than this are dropped: a reply to a day-old question is noise, and the catch-up
# poller (bounded look-back) is the recovery path for anything older.
MAX_MESSAGE_AGE_MS = 6 * 3600 * 1000
# A job may block on the LLM for a while; TimeLimit cannot interrupt a blocking call anyway, so
# it is a backstop, and every client has its own timeout.
JOB_TIME_LIMIT_MS = 10 * 60 * 1000


class CitebotRedisBroker(RedisBroker):
    """dramatiq's Redis broker, whose enqueues can be collected instead of sent (:meth:`collected`).

    The webhook enqueues two messages per question delivery (refresh the post, answer it); each
    ``send`` is a blocking round trip, and on a loaded 2-core machine the round trips' system calls
    are most of a delivery's cost (docs/performance.md). Inside ``collected()`` a ``send`` makes the
    enqueue command dramatiq would send (its ``dispatch`` script, the same arguments as
    ``RedisBroker._dispatch``) and appends it to the yielded list, for the caller to send: the webhook
    sends it on its asyncio client with other deliveries' commands (``worker.redis_batch``).
    ``pipelined()`` sends a block's enqueues together on this broker's own client. dramatiq is pinned
    (constraints.txt) and tests/worker/test_broker.py consumes such messages with a real ``Worker``.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)  # type: ignore[no-untyped-call]
        self._pending: ContextVar[list[RedisCommand] | None] = ContextVar(
            f"citebot_pending_{id(self)}", default=None
        )

    @contextlib.contextmanager
    def collected(self) -> Iterator[list[RedisCommand]]:
        """Enqueues made in the block are not sent: their commands are appended to the yielded list."""
        outer = self._pending.get()
        if outer is not None:  # nested: they join the outer block's list
            yield outer
            return
        commands: list[RedisCommand] = []
        token = self._pending.set(commands)
        try:
            yield commands
        finally:
            self._pending.reset(token)

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """Enqueues made in the block are sent together when it ends; none are sent if it raises."""
        nested = self._pending.get() is not None
        with self.collected() as commands:
            yield
        if not nested and commands:
            self._execute(commands)

    def _execute(self, commands: list[RedisCommand]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command.args)
        try:
            pipe.execute()
        except redis_lib.exceptions.NoScriptError:
            # Redis lost its script cache (restart, SCRIPT FLUSH): load it and send the batch again
            # (nothing of it was enqueued: every command of the batch is the missing script).
            dispatch = self.scripts["dispatch"]
            dispatch.sha = self.client.script_load(dispatch.script)
            retry = self.client.pipeline(transaction=False)
            for command in commands:
                retry.execute_command(*command.args)
            retry.execute()

    def close(self) -> None:
        """Close the broker's connections to Redis. dramatiq's ``RedisBroker.close`` does nothing, and
        its client's pool (its own, made from the URL) kept every socket open after the broker was
        closed: a test's closed broker caught in a reference cycle warned of an unclosed socket at a
        later garbage collection. Disconnecting the pool closes them; a later send reconnects."""
        super().close()
        self.client.connection_pool.disconnect()

    def do_enqueue(self, queue_name: str, message_id: str, data: bytes) -> Any:
        pending = self._pending.get()
        if pending is None:
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
        # EVALSHA directly: the script object's own call would check (a round trip) that the script is
        # loaded before every batch. The script's source goes with it, for when Redis has lost it.
        dispatch = self.scripts["dispatch"]
        script = dispatch.script if isinstance(dispatch.script, bytes | str) else bytes(dispatch.script)
        pending.append(RedisCommand(("EVALSHA", dispatch.sha, 1, self.namespace, *args), script))
        return None


def broker_middleware() -> list[Middleware]:
    """The middleware of every citebot broker (the Redis one here, tests' ``StubBroker``). The retry
    budget is not here but in each actor's options (``worker.actors``), the one place it is set;
    ``CurrentMessage`` lets an actor body know which attempt it is."""
    return [
        AgeLimit(max_age=MAX_MESSAGE_AGE_MS),
        TimeLimit(time_limit=JOB_TIME_LIMIT_MS),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(),
        CurrentMessage(),
    ]


def build_broker(redis: RedisSettings) -> CitebotRedisBroker:
    """A Redis broker with ``broker_middleware()``."""
    return CitebotRedisBroker(
        url=redis.url,
        namespace=f"{redis.namespace}-tasks",
        middleware=broker_middleware(),
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
