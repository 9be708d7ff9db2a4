"""Gauges read at scrape time: the queues' depth and age in Redis, and the post index's size.

What an operator alerts on besides the counters: a queue that grows or whose oldest message ages (no
worker consumes it), dead-lettered messages, and an empty index (every question falls back to the
legacy path). dramatiq's Redis broker keeps each queue as a list of message ids (``<ns>:<queue>``,
oldest first) beside a hash of the messages (``<ns>:<queue>.msgs``) and a dead-letter set
(``<ns>:<queue>.XQ``); the oldest message's ``message_timestamp`` gives the age. Errors leave a gauge
out of the scrape (and are logged at DEBUG): a scrape never fails because Redis or PostgreSQL does.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import psycopg
import redis as redis_lib
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

INDEX_SIZE_SQL = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM post_index) "
    "THEN greatest((SELECT reltuples FROM pg_class WHERE relname = 'post_index'), 1) ELSE 0 END"
)


class BacklogCollector(Collector):
    """``citebot_queue_messages``, ``citebot_queue_oldest_age_seconds``, ``citebot_queue_dead_messages``
    per queue, and ``citebot_index_posts`` (an estimate; 0 exactly when the index is empty)."""

    def __init__(
        self,
        redis: redis_lib.Redis,
        namespace: str,
        queues: Iterable[str],
        connections: Callable[[], AbstractContextManager[psycopg.Connection]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.namespace = namespace
        self.queues = tuple(queues)
        self.connections = connections
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("citebot_queue_messages", "Messages waiting in a queue.", labels=["queue"])
        age = GaugeMetricFamily(
            "citebot_queue_oldest_age_seconds", "Age of a queue's oldest waiting message.", labels=["queue"]
        )
        dead = GaugeMetricFamily(
            "citebot_queue_dead_messages", "Dead-lettered messages of a queue.", labels=["queue"]
        )
        for queue in self.queues:
            try:
                waiting, oldest, dead_n = self._queue(queue)
            except redis_lib.RedisError as exc:
                log.debug("queue gauges unavailable: %s", exc)
                break
            depth.add_metric([queue], waiting)
            age.add_metric([queue], oldest)
            dead.add_metric([queue], dead_n)
        yield depth
        yield age
        yield dead
        size = self._index_size()
        if size is not None:
            index = GaugeMetricFamily("citebot_index_posts", "Posts in the index (estimate; 0 when empty).")
            index.add_metric([], size)
            yield index

    def _queue(self, queue: str) -> tuple[int, float, int]:
        key = f"{self.namespace}:{queue}"
        pipe = self.redis.pipeline()
        pipe.llen(key)
        pipe.lindex(key, 0)
        pipe.zcard(f"{key}.XQ")
        waiting, head, dead_n = pipe.execute()
        oldest = 0.0
        if head is not None:
            raw: Any = self.redis.hget(f"{key}.msgs", head)
            if raw:
                stamp_ms = json.loads(raw).get("message_timestamp")
                if isinstance(stamp_ms, int | float):
                    oldest = max(0.0, self.clock() - stamp_ms / 1000)
        return int(waiting), oldest, int(dead_n)

    def _index_size(self) -> float | None:
        if self.connections is None:
            return None
        try:
            with self.connections() as conn:
                row = conn.execute(INDEX_SIZE_SQL).fetchone()
                conn.rollback()
        except psycopg.Error as exc:
            log.debug("index gauge unavailable: %s", exc)
            return None
        return float(row[0]) if row and row[0] is not None else None
