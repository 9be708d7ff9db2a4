"""The process-wide runtime of a worker: settings, a connection pool, the HTTP, forum and Redis clients,
the one embedder, the indexer and the answerer, each typed.

Built by the composition root (``worker.app.assemble``: ``build_runtime``, lazily as ``lazy_runtime``'s
``Once`` so declaring actors reads no environment and opens nothing) and closed once at shutdown. The answer
pipeline plugs in through the ``Answerer`` protocol, the index stack through ``Indexer``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar

import httpx
import redis as redis_lib
from psycopg_pool import ConnectionPool

from worker.budget import Priority
from worker.clients.discourse import DiscourseClient
from worker.domain import Delivery
from worker.protocols import Embedder, Indexer
from worker.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


class Closeable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closeable)


class Answerer(Protocol):
    """Owns a question's ``answers`` row: claims it (the first delivery of a post creates it, every later
    one finds it) and takes it forward from its state; a row in a final state is left as it is."""

    def answer(self, delivery: Delivery, *, last_attempt: bool = False) -> None:
        """``last_attempt``: the queue will not retry a transient failure of this attempt."""
        ...


class Once(Generic[T]):
    """A long-lived object built on first use, exactly once per process, whichever thread asks first."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def __call__(self) -> T:
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._build()
                value = self._value
        return value

    def take(self) -> T | None:
        """The object if it was built, forgetting it (the next call builds anew); None if never built."""
        with self._lock:
            value, self._value = self._value, None
        return value

    def close(self: Once[C]) -> None:
        """Close the object if it was built (and forget it); nothing to do if it never was."""
        value = self.take()
        if value is not None:
            value.close()


@dataclass(frozen=True, slots=True)
class Runtime:
    """What actor bodies use. ``answerer`` is the configured ``Answerer`` (None in a process that does not
    answer: ``citebot poll``); ``embedder()`` is the
    process's one embedder, shared by answering and index refreshes (a local model loads once);
    ``indexer()`` keeps the post index in step with the forum (built on first use: the webhook
    process, which only enqueues, never loads the index stack)."""

    settings: Settings
    pool: ConnectionPool
    http: httpx.Client
    forum: DiscourseClient
    redis: redis_lib.Redis
    embedder: Once[Embedder]
    indexer: Once[Indexer]
    answerer: Answerer | None = None
    # The second bi-encoder (CITEBOT_EXCERPT_EMBEDDINGS__*), shared by answering and refreshes; None: off.
    excerpt_embedder: Once[Embedder | None] = field(default_factory=lambda: Once(lambda: None))

    def at(self, priority: Priority) -> Runtime:
        """The same runtime whose forum client speaks at ``priority`` of the site-wide API budget."""
        return replace(self, forum=self.forum.at(priority))

    def close(self) -> None:
        self.pool.close()
        self.http.close()
        self.redis.close()
