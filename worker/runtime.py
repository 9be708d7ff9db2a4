"""The process-wide runtime of a worker: settings, a connection pool, the HTTP client and the forum client.

Built lazily on first use by ``RuntimeProvider`` (so declaring actors reads no environment and opens
nothing) and closed once at shutdown. The answer pipeline plugs in through the ``Answerer`` protocol.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx
import redis as redis_lib
from psycopg_pool import ConnectionPool

from worker.clients.discourse import DiscourseClient
from worker.db.connect import open_pool
from worker.settings import Settings

log = logging.getLogger(__name__)


class Answerer(Protocol):
    """Takes a claimed question (an ``answers`` row) forward; resumes from the row's state."""

    def answer(self, post_id: int, *, last_attempt: bool = False) -> None:
        """``last_attempt``: the queue will not retry a transient failure of this attempt."""
        ...


class UnconfiguredAnswerer:
    """The default: leaves the row in ``queued`` and says so (the pipeline is plugged in by the lead)."""

    def answer(self, post_id: int, *, last_attempt: bool = False) -> None:
        log.warning("no answerer configured; question stays queued", extra={"post_id": post_id})


@dataclass(frozen=True, slots=True)
class Runtime:
    """What actor bodies use. ``answer`` delegates to the configured ``Answerer``."""

    settings: Settings
    pool: ConnectionPool
    http: httpx.Client
    forum: DiscourseClient
    redis: redis_lib.Redis
    answerer: Answerer

    def answer(self, post_id: int, *, last_attempt: bool = False) -> None:
        self.answerer.answer(post_id, last_attempt=last_attempt)

    def close(self) -> None:
        self.pool.close()
        self.http.close()
        self.redis.close()


AnswererFactory = Callable[[Runtime], Answerer]


def build_runtime(settings: Settings, answerer_factory: AnswererFactory | None = None) -> Runtime:
    """Open the pool and clients described by ``settings``."""
    pool = open_pool(settings.database)
    http = httpx.Client(timeout=settings.discourse.timeout_s)
    forum = DiscourseClient(http, settings.discourse)
    redis = redis_lib.Redis.from_url(settings.redis.url)
    runtime = Runtime(settings, pool, http, forum, redis, UnconfiguredAnswerer())
    if answerer_factory is not None:
        runtime = Runtime(settings, pool, http, forum, redis, answerer_factory(runtime))
    return runtime


class RuntimeProvider:
    """Builds the ``Runtime`` on first call (thread-safe) and returns the same one afterwards."""

    def __init__(self, settings: Settings, answerer_factory: AnswererFactory | None = None) -> None:
        self.settings = settings
        self._factory = answerer_factory
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Runtime:
        runtime = self._runtime
        if runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = build_runtime(self.settings, self._factory)
                runtime = self._runtime
        return runtime

    def close(self) -> None:
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None
