"""The site-wide Discourse API budget: one token bucket in Redis for every citebot process and caller.

Discourse counts every request that carries an admin ``Api-Key`` against ONE limiter for the whole
site, ``max_admin_api_reqs_per_minute`` (60 by default, ``DISCOURSE_MAX_ADMIN_API_REQS_PER_MINUTE`` in
``app.yml``), whatever the route (``lib/auth/default_current_user_provider.rb``): citebot's answers,
flag reads, poller, index refresh and API backfill share it with every other integration of the forum.
citebot spends ``discourse.api_requests_per_minute`` of it, in bursts of at most ``api_burst``, so that
in any minute it sends at most rate + burst requests (40 + 12 by default: 52 of 60).

Priorities: a caller takes a token only while more than its floor remain. ``answer`` (a member is
waiting; the flags an answer reads) has floor 0, ``background`` (poller, index refresh) keeps
``api_reserve`` tokens for answers, ``bulk`` (API backfill) keeps twice that. A backfill running flat
out therefore holds the bucket at 2 × reserve and an answer's few calls find their tokens at once.

A 429 from Discourse (another integration spent the site's budget) pauses the bucket for its
``Retry-After``: every process waits, not only the one that was told. A caller that would wait longer
than ``api_max_wait_s`` gets ``RateLimitedError`` (its job is retried later) instead of holding a
thread; ``bulk`` waits as long as it takes. When Redis cannot be reached each process falls back to a
bucket of its own with the same numbers (logged), which keeps the bot working but no longer shares.
Every process must run with the same budget settings: each call passes its rate and size to Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Literal

import redis as redis_lib
from prometheus_client import Counter, Histogram

from worker.errors import RateLimitedError
from worker.ratelimit import TokenBucket
from worker.settings import DiscourseSettings, Settings

log = logging.getLogger(__name__)

Priority = Literal["answer", "background", "bulk"]
REDIS_RETRY_S = 10.0  # how long a process paces itself alone after a Redis error before trying again
PRIORITIES: tuple[Priority, ...] = ("answer", "background", "bulk")

API_REQUESTS = Counter(
    "citebot_discourse_api_requests", "Discourse API requests sent, by priority.", ["priority"]
)
API_WAIT = Histogram(
    "citebot_discourse_api_wait_seconds",
    "Time a Discourse API request waited for the site-wide budget, by priority.",
    ["priority"],
    buckets=(0.0, 0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 300),
)
API_PAUSES = Counter("citebot_discourse_api_pauses", "429s from Discourse that paused the whole budget.")

# KEYS[1] the bucket; ARGV rate (tokens/s), capacity, floor. Returns the seconds to wait ("0": taken).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, capacity, floor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'paused_until')
local tokens, at, paused = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
if tokens == nil or at == nil then tokens, at = capacity, now end
if now < paused then return tostring(paused - now) end
tokens = math.min(capacity, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= floor + 1 - 1e-9 then
  tokens = math.max(0, tokens - 1)
else
  wait = math.max(0.001, (floor + 1 - tokens) / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(math.max(now, at)))
redis.call('EXPIRE', KEYS[1], 3600)
return tostring(wait)
"""
# KEYS[1] the bucket; ARGV seconds. Empties the bucket until then.
_PAUSE = """
local t = redis.call('TIME')
local untl = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'paused_until')) or 0
if untl > cur then
  redis.call('HSET', KEYS[1], 'paused_until', tostring(untl), 'tokens', '0', 'at', tostring(untl))
  redis.call('EXPIRE', KEYS[1], 3600)
end
return 1
"""


class ApiBudget:
    """The shared bucket (see the module docstring). Thread-safe; one per process is enough."""

    def __init__(
        self,
        settings: DiscourseSettings,
        *,
        redis: redis_lib.Redis | None = None,
        key: str = "citebot:discourse-api-budget",
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = settings.api_requests_per_minute
        self._burst = settings.api_burst
        self._floors: dict[Priority, int] = {
            "answer": 0,
            "background": settings.api_reserve,
            "bulk": 2 * settings.api_reserve,
        }
        self._max_wait_s = settings.api_max_wait_s
        self._redis = redis
        self._key = key
        self._sleep = sleep
        self._local = TokenBucket(self._rate, burst=self._burst, clock=clock)
        self._take = redis.register_script(_TAKE) if redis is not None else None
        self._pause = redis.register_script(_PAUSE) if redis is not None else None
        self._warned = False
        self._redis_down_until = 0.0  # after a Redis error, the local bucket for a while

    @property
    def shared(self) -> bool:
        """Whether the bucket lives in Redis (shared by every process)."""
        return self._redis is not None

    def acquire(self, priority: Priority) -> float:
        """Take one request's token, waiting as the priority allows; returns the seconds waited."""
        floor = self._floors[priority]
        waited = 0.0
        while True:
            wait = self._try(floor)
            if wait <= 0.0:
                API_REQUESTS.labels(priority).inc()
                API_WAIT.labels(priority).observe(waited)
                if waited >= 1.0:
                    log.debug("Discourse API budget: %s request waited %.1f s", priority, waited)
                return waited
            if priority != "bulk" and waited + wait > self._max_wait_s:
                raise RateLimitedError(
                    f"the Discourse API budget is spent for {wait:.0f} s",
                    service="discourse",
                    retry_after=wait,
                )
            step = min(wait, 5.0)  # look again: a pause may have been lifted or lengthened
            self._sleep(step)
            waited += step

    def pause(self, seconds: float) -> None:
        """Discourse said to wait (429 ``Retry-After``): no process sends anything for ``seconds``."""
        API_PAUSES.inc()
        self._local.pause(seconds)
        if self._pause is not None and time.monotonic() >= self._redis_down_until:
            try:
                self._pause(keys=[self._key], args=[float(seconds)])
            except redis_lib.RedisError as exc:
                self._redis_failed(exc)

    def _try(self, floor: int) -> float:
        if self._take is not None and time.monotonic() >= self._redis_down_until:
            try:
                return float(self._take(keys=[self._key], args=[self._rate / 60.0, self._burst, floor]))
            except redis_lib.RedisError as exc:
                self._redis_failed(exc)
        return self._local.take(floor)

    def _redis_failed(self, exc: Exception) -> None:
        self._redis_down_until = time.monotonic() + REDIS_RETRY_S
        if not self._warned:
            log.warning(
                "Discourse API budget: Redis unreachable (%s); this process paces itself alone",
                type(exc).__name__,
            )
            self._warned = True


def build_budget(
    settings: DiscourseSettings, redis: redis_lib.Redis | None, namespace: str = "citebot"
) -> ApiBudget:
    """The budget at its shared key (``<namespace>:discourse-api-budget``), or a local one without Redis."""
    return ApiBudget(settings, redis=redis, key=f"{namespace}:discourse-api-budget")


def shared_budget(settings: Settings) -> ApiBudget:
    """The shared budget for a one-off process (a command, a backfill), over its own Redis client."""
    redis = redis_lib.Redis.from_url(settings.redis.url, socket_connect_timeout=2.0, socket_timeout=2.0)
    return build_budget(settings.discourse, redis, settings.redis.namespace)
