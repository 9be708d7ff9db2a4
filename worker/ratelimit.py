"""A small thread-safe token bucket with priority floors: the in-process half of the API budget.

``worker.budget.ApiBudget`` keeps the same bucket in Redis for every process; this one serves a process
on its own (tests, one-off commands) and stands in when Redis cannot be reached.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Rounding must not leave a caller waiting forever for the last billionth of a token.
_EPSILON = 1e-9
_MIN_WAIT_S = 0.001


class TokenBucket:
    """``rate_per_minute`` tokens a minute, at most ``burst`` saved up.

    A caller with a ``floor`` takes a token only while more than ``floor`` remain, so lower priorities
    leave the last tokens to higher ones (floor 0 may take the last).
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
        self._paused_until = -1e300
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self._tokens = min(self._burst, self._tokens + max(0.0, now - self._last) * self._rate)
        self._last = max(self._last, now)

    def take(self, floor: float = 0.0) -> float:
        """Take a token if more than ``floor`` are there: 0.0; else the seconds until one would be."""
        with self._lock:
            now = self._clock()
            if now < self._paused_until:
                return self._paused_until - now
            self._refill(now)
            if self._tokens >= floor + 1.0 - _EPSILON:
                self._tokens = max(0.0, self._tokens - 1.0)
                return 0.0
            return max(_MIN_WAIT_S, (floor + 1.0 - self._tokens) / self._rate)

    def pause(self, seconds: float) -> None:
        """Hand out nothing for ``seconds`` (a server said to wait), then refill from empty."""
        with self._lock:
            until = self._clock() + max(0.0, seconds)
            if until > self._paused_until:
                self._paused_until = until
                self._tokens = 0.0
                self._last = until

    def try_acquire(self) -> bool:
        """Take a token if one is there; never waits."""
        return self.take() == 0.0

    def acquire(self) -> float:
        """Take a token, waiting for it if needed; returns the seconds waited."""
        waited = 0.0
        while True:
            wait = self.take()
            if wait == 0.0:
                return waited
            self._sleep(wait)
            waited += wait
