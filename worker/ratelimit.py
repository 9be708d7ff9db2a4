"""A small thread-safe token bucket, used to keep admin-API calls well under Discourse's site budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``rate_per_minute`` tokens a minute, at most ``burst`` saved up; ``acquire`` waits for one.

    Discourse allows about 60 admin-API requests a minute for the whole site (the admin UI included),
    so the bot spends a fixed fraction of it and waits rather than earning a 429.
    """

    def __init__(
        self,
        rate_per_minute: float,
        *,
        burst: int = 5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_per_minute <= 0:
            raise ValueError("rate_per_minute must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self._rate = rate_per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is there; never waits."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def acquire(self) -> float:
        """Take a token, waiting for it if needed; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return waited
                wait = (1.0 - self._tokens) / self._rate
            self._sleep(wait)
            waited += wait
