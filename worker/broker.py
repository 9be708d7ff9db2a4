"""The dramatiq broker, built from settings (never at import time, never a silent localhost default)."""

from __future__ import annotations

from dramatiq.brokers.redis import RedisBroker
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


def build_broker(redis: RedisSettings) -> RedisBroker:
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
    return RedisBroker(  # type: ignore[no-untyped-call]
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
