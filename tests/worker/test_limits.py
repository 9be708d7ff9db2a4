from __future__ import annotations

import pytest

from tests.conftest import REDIS_NAMESPACE, RedisClients
from worker.limits import RateLimiter
from worker.settings import LimitsSettings

pytestmark = pytest.mark.integration


def test_user_limit_counts_each_question_once_over_a_sliding_hour(
    redis_url: str, redis_client: RedisClients
) -> None:
    client = redis_client(redis_url)
    limiter = RateLimiter(client, LimitsSettings(per_user_per_hour=2, per_topic_per_hour=0), REDIS_NAMESPACE)
    assert limiter.check(post_id=1, user_id=7, topic_id=1, now=1000).allowed
    # A retried job for the same post does not count twice.
    assert limiter.check(post_id=1, user_id=7, topic_id=1, now=1001).allowed
    assert limiter.check(post_id=2, user_id=7, topic_id=2, now=1002).allowed
    third = limiter.check(post_id=3, user_id=7, topic_id=3, now=1003)
    assert (third.allowed, third.reason, third.user_count) == (False, "per_user", 3)
    # Another member is not affected.
    assert limiter.check(post_id=4, user_id=8, topic_id=3, now=1004).allowed
    # Refused questions count too, so a flood stays limited ...
    assert limiter.check(post_id=5, user_id=7, topic_id=3, now=1005).user_count == 4
    # ... until the hour has moved past all of them.
    assert limiter.check(post_id=6, user_id=7, topic_id=3, now=1005 + 3601).allowed


def test_topic_limit(redis_url: str, redis_client: RedisClients) -> None:
    client = redis_client(redis_url)
    limiter = RateLimiter(client, LimitsSettings(per_user_per_hour=0, per_topic_per_hour=1), REDIS_NAMESPACE)
    assert limiter.check(post_id=1, user_id=1, topic_id=9, now=10).allowed
    decision = limiter.check(post_id=2, user_id=2, topic_id=9, now=11)
    assert (decision.allowed, decision.reason) == (False, "per_topic")
