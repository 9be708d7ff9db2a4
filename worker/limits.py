"""Per-user and per-topic rate limits, counted in Redis over a sliding hour.

A limit that is hit is a return value (the pipeline records state ``denied``, reason
``limit.<reason>``, and posts the short notice with the first question over the limit when the admin
chose notices), never an exception. Counting happens once per question (keyed by post id), so a retried
job does not count twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from worker.settings import LimitsSettings

WINDOW_S = 3600


@dataclass(frozen=True, slots=True)
class LimitDecision:
    allowed: bool
    reason: str | None = None
    user_count: int = 0
    topic_count: int = 0
    first_over: bool = False  # the first question over the limit in this window (the one to tell)


class RateLimiter:
    """Sliding-window counters (sorted sets of post ids scored by time) per user and per topic."""

    def __init__(self, client: redis.Redis, settings: LimitsSettings, namespace: str) -> None:
        self._redis = client
        self._settings = settings
        self._ns = namespace

    def check(self, *, post_id: int, user_id: int, topic_id: int, now: float | None = None) -> LimitDecision:
        """Record this question and say whether it is within the limits."""
        now = time.time() if now is None else now
        user_key = f"{self._ns}:limit:user:{user_id}"
        topic_key = f"{self._ns}:limit:topic:{topic_id}"
        pipe = self._redis.pipeline(transaction=True)
        for key in (user_key, topic_key):
            pipe.zremrangebyscore(key, 0, now - WINDOW_S)
            pipe.zadd(key, {str(post_id): now}, nx=True)
            pipe.zrank(key, str(post_id))
            pipe.expire(key, WINDOW_S + 60)
        results = pipe.execute()
        # zrank is 0-based: this question's position among the hour's questions.
        user_pos = int(results[2]) + 1
        topic_pos = int(results[6]) + 1
        per_user, per_topic = self._settings.per_user_per_hour, self._settings.per_topic_per_hour
        if per_user and user_pos > per_user:
            return LimitDecision(False, "per_user", user_pos, topic_pos, user_pos == per_user + 1)
        if per_topic and topic_pos > per_topic:
            return LimitDecision(False, "per_topic", user_pos, topic_pos, topic_pos == per_topic + 1)
        return LimitDecision(True, None, user_pos, topic_pos)
