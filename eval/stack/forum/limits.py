"""Discourse's admin-API rate limit, as ``lib/auth/default_current_user_provider.rb`` applies it.

Every request that carries a valid admin ``Api-Key`` counts against ONE site-wide limiter
(``RateLimiter.new(nil, "admin_api_min", GlobalSetting.max_admin_api_reqs_per_minute, 60)``), whatever
the route, the key or the user it acts as. Discourse's ``RateLimiter`` keeps the times of the last
``max`` requests: a request is refused while the oldest of them is younger than the window, and a
refused request is not recorded. The refusal is a 429 whose ``Retry-After`` and ``extras.wait_seconds``
say when the oldest recorded request leaves the window, with the header
``Discourse-Rate-Limit-Error-Code: admin_api_key_rate_limit``.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable

from starlette.responses import JSONResponse

from eval.stack.forum.serialize import error

ERROR_CODE = "admin_api_key_rate_limit"


class UserApiKeys:
    """Members' User API keys (``User-Api-Key``), as ``default_current_user_provider.rb`` treats them:
    the key acts as its member only, and each key has its own limits, ``max_user_api_reqs_per_minute``
    (20) and ``max_user_api_reqs_per_day`` (2880), error codes ``user_api_key_limiter_60_secs`` and
    ``user_api_key_limiter_1_day``; the site-wide admin-API limit never counts them. In Discourse a
    member grants a key through ``/user-api-key/new``; here the test control ``POST
    /__forum/user-api-keys`` mints one."""

    def __init__(self, per_minute: int = 20, per_day: int = 2880, day_s: float = 86_400.0) -> None:
        self.per_minute = per_minute
        self.per_day = per_day
        self.day_s = day_s
        self._users: dict[str, str] = {}
        self._limits: dict[str, tuple[SlidingWindowLimiter, SlidingWindowLimiter]] = {}
        self._lock = threading.Lock()

    def mint(self, username: str) -> str:
        key = secrets.token_hex(32)
        with self._lock:
            self._users[key] = username
            self._limits[key] = (
                SlidingWindowLimiter(self.per_minute, 60.0),
                SlidingWindowLimiter(self.per_day, self.day_s),
            )
        return key

    def username(self, key: str) -> str | None:
        with self._lock:
            return self._users.get(key)

    def perform(self, key: str) -> JSONResponse | None:
        """Count one request of ``key``: None when allowed, else Discourse's 429."""
        with self._lock:
            limits = self._limits.get(key)
        if limits is None:
            return None  # an unknown key is refused by the route (403), not counted
        codes = ("user_api_key_limiter_60_secs", "user_api_key_limiter_1_day")
        for limiter, code in zip(limits, codes, strict=True):
            wait = limiter.perform()
            if wait is not None:
                return rate_limited(wait, code)
        return None


class SlidingWindowLimiter:
    """At most ``limit`` requests in any ``window_s`` seconds; thread-safe."""

    def __init__(
        self, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if limit < 0 or window_s <= 0:
            raise ValueError("limit must be >= 0 and window_s > 0")
        self.limit = limit
        self.window_s = window_s
        self._clock = clock
        self._times: deque[float] = deque()
        self._lock = threading.Lock()
        self.performed = 0
        self.refused = 0
        self.peak_in_window = 0

    def perform(self) -> float | None:
        """Record one request; None when allowed, else the seconds until one would be."""
        with self._lock:
            now = self._clock()
            while self._times and now - self._times[0] >= self.window_s:
                self._times.popleft()
            if len(self._times) >= self.limit:
                self.refused += 1
                oldest = self._times[0] if self._times else now
                return max(0.0, oldest + self.window_s - now)
            self._times.append(now)
            self.performed += 1
            self.peak_in_window = max(self.peak_in_window, len(self._times))
            return None


def rate_limited(wait_s: float, code: str = ERROR_CODE) -> JSONResponse:
    """Discourse's 429 for a rate limit (``ApplicationController`` rescuing ``LimitExceeded``)."""
    wait = max(1, math.ceil(wait_s))
    time_left = f"{wait} seconds" if wait != 1 else "1 second"
    response = error(
        429,
        f"You’ve performed this action too many times. Please wait {time_left} before trying again.",
        "rate_limit",
        extras={"wait_seconds": wait, "time_left": time_left},
    )
    response.headers["Retry-After"] = str(wait)
    response.headers["Discourse-Rate-Limit-Error-Code"] = code
    return response
