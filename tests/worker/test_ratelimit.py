from __future__ import annotations

import pytest

from worker.ratelimit import TokenBucket


def test_bucket_refills_at_the_rate_and_caps_at_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(60, burst=3, clock=lambda: now[0], sleep=lambda s: None)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    now[0] += 1.0
    assert bucket.try_acquire() is True
    assert bucket.try_acquire() is False
    now[0] += 100.0
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(0)
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(10, burst=0)
