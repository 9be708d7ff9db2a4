"""The site-wide Discourse API budget over the real Redis: shared by every process, priorities, pauses."""

from __future__ import annotations

import time

import pytest

from tests.conftest import REDIS_NAMESPACE, RedisClients
from worker.budget import ApiBudget, build_budget
from worker.errors import RateLimitedError
from worker.settings import DiscourseSettings

pytestmark = pytest.mark.integration


def settings(**values: object) -> DiscourseSettings:
    return DiscourseSettings.model_validate(
        {"api_requests_per_minute": 6, "api_burst": 5, "api_reserve": 1, **values}
    )


def test_processes_share_one_bucket(redis_url: str, redis_client: RedisClients) -> None:
    # Two processes' budgets over one Redis: together they never exceed the burst at once.
    a = build_budget(settings(api_reserve=0), redis_client(redis_url), REDIS_NAMESPACE)
    b = build_budget(settings(api_reserve=0), redis_client(redis_url), REDIS_NAMESPACE)
    assert a.shared
    assert b.shared
    taken = [budget._try(0) == 0.0 for budget in (a, b, a, b, a, b, a)]
    assert taken == [True] * 5 + [False] * 2


def test_backfill_leaves_the_reserve_and_answers_take_it(redis_url: str, redis_client: RedisClients) -> None:
    budget = build_budget(settings(api_reserve=2), redis_client(redis_url), REDIS_NAMESPACE)
    bulk = [budget._try(4) == 0.0 for _ in range(3)]  # floor 2 x reserve
    assert bulk == [True, False, False]
    assert [budget._try(2) == 0.0 for _ in range(3)] == [True, True, False]  # background: down to 2
    assert [budget._try(0) == 0.0 for _ in range(2)] == [True, True]  # answers take the last ones
    assert budget._try(0) == pytest.approx(10.0, abs=0.5)  # 6 a minute: one every 10 s


def test_a_429_pauses_every_process(redis_url: str, redis_client: RedisClients) -> None:
    one = build_budget(settings(), redis_client(redis_url), REDIS_NAMESPACE)
    other = build_budget(settings(), redis_client(redis_url), REDIS_NAMESPACE)
    one.pause(60)
    assert other._try(0) == pytest.approx(60.0, abs=1.0)
    with pytest.raises(RateLimitedError) as info:
        other.acquire("answer")  # longer than api_max_wait_s: the job is retried later instead
    assert info.value.retry_after == pytest.approx(60.0, abs=1.0)


def test_without_redis_a_process_paces_itself(redis_client: RedisClients) -> None:
    dead = redis_client("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    budget = ApiBudget(settings(api_reserve=0), redis=dead, sleep=sleep, clock=lambda: now[0])
    started = time.monotonic()
    waits = [budget.acquire("bulk") for _ in range(6)]
    assert waits[:5] == [0.0] * 5
    assert waits[5] == pytest.approx(10.0)
    assert time.monotonic() - started < 30


def test_budget_must_leave_headroom_under_the_forums_limit() -> None:
    with pytest.raises(ValueError, match="over the forum's limit"):
        DiscourseSettings.model_validate({"api_requests_per_minute": 55, "api_burst": 10})
    assert DiscourseSettings.model_validate(
        {"site_api_limit_per_minute": 200, "api_requests_per_minute": 150, "api_burst": 20}
    )
    with pytest.raises(ValueError, match="api_reserve"):
        DiscourseSettings.model_validate({"api_burst": 4, "api_reserve": 2})
