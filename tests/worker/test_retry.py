"""``worker.retry``: the one policy for loops that retry a transient failure inside a call."""

from __future__ import annotations

import pytest

from worker.errors import RateLimitedError, ServiceUnavailableError, ValidationError
from worker.retry import RetryPolicy, call_with_retry


def failing(errors: list[Exception], value: str = "ok"):  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return value

    return call, calls


def test_backoff_doubles_up_to_the_cap_and_the_servers_wait_wins() -> None:
    policy = RetryPolicy(attempts=8, base_s=1.0, cap_s=20.0, jitter=False)
    assert [policy.delay(a) for a in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert policy.delay(7) is None  # the eighth try was the last
    assert policy.delay(0, retry_after=7.0) == 7.0


def test_jitter_stays_within_half_to_the_full_wait() -> None:
    policy = RetryPolicy(attempts=3, base_s=2.0)
    assert all(1.0 <= (policy.delay(0) or 0) <= 2.0 for _ in range(200))


def test_a_wait_longer_than_the_longest_is_not_slept_on() -> None:
    policy = RetryPolicy(attempts=5, longest_wait_s=20.0)
    assert policy.delay(0, retry_after=21.0) is None
    sleeps: list[float] = []
    call, calls = failing([RateLimitedError("busy", retry_after=120.0)])
    with pytest.raises(RateLimitedError):
        call_with_retry(call, policy, sleep=sleeps.append)
    assert (len(calls), sleeps) == (1, [])


def test_transient_errors_are_retried_until_the_attempts_run_out() -> None:
    sleeps: list[float] = []
    call, calls = failing([ServiceUnavailableError("down")] * 2)
    assert call_with_retry(call, RetryPolicy(attempts=3, jitter=False), sleep=sleeps.append) == "ok"
    assert (len(calls), sleeps) == (3, [1.0, 2.0])
    call, calls = failing([ServiceUnavailableError("down")] * 3)
    with pytest.raises(ServiceUnavailableError):
        call_with_retry(call, RetryPolicy(attempts=3, jitter=False), sleep=sleeps.append)
    assert len(calls) == 3


def test_other_errors_propagate_at_once() -> None:
    call, calls = failing([ValidationError("too long", service="tei", status=413)])
    with pytest.raises(ValidationError):
        call_with_retry(call, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert len(calls) == 1


def test_on_retry_sees_each_retry_and_may_wait_elsewhere() -> None:
    seen: list[tuple[str, int, float]] = []
    sleeps: list[float] = []

    def waited(exc: Exception, retry: int, wait: float) -> float:
        seen.append((type(exc).__name__, retry, wait))
        return 0.0 if isinstance(exc, RateLimitedError) else wait

    call, _ = failing([RateLimitedError("busy", retry_after=3.0), ServiceUnavailableError("down")])
    call_with_retry(call, RetryPolicy(attempts=3, jitter=False), sleep=sleeps.append, on_retry=waited)
    assert seen == [("RateLimitedError", 1, 3.0), ("ServiceUnavailableError", 2, 2.0)]
    assert sleeps == [2.0]  # the 429's wait happened elsewhere (the API budget's pause)


def test_a_policy_makes_at_least_one_attempt() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RetryPolicy(attempts=0)
