"""Retrying a transient failure: the one policy for loops that retry inside a call.

citebot retries at two levels, each with one formula:

- **a job** (a dramatiq message: answering a question, indexing a post) is retried by dramatiq's
  ``Retries`` middleware with the options of ``worker.actors.retry_options`` (``limits.max_retries``,
  ``limits.min_backoff_s`` … ``limits.max_backoff_s``): the message goes back to Redis and no worker
  thread waits;
- **a call** that is worth retrying in place (the backfill's embedding batches and API pages, one LLM
  completion) loops with a :class:`RetryPolicy` through :func:`call_with_retry`: the server's
  ``Retry-After`` when it sent one, else ``base_s * 2**attempt`` capped at ``cap_s`` (with jitter unless
  the caller needs exact waits); a ``Retry-After`` longer than ``longest_wait_s`` is not slept on, the
  error propagates at once (a job is then rescheduled by the first level instead of holding a thread).

Only ``worker.errors.TransientError`` is retried; every other error propagates at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from worker.errors import TransientError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all (1: no retry)."""

    attempts: int = 6
    base_s: float = 1.0
    cap_s: float = 60.0
    jitter: bool = True
    longest_wait_s: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("a retry policy makes at least one attempt")

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait after the failed try number ``attempt`` (0-based), or None: give up now."""
        if attempt + 1 >= self.attempts:
            return None
        if retry_after is not None:
            if self.longest_wait_s is not None and retry_after > self.longest_wait_s:
                return None
            return retry_after
        backoff = min(self.cap_s, self.base_s * 2.0**attempt)
        if self.jitter:
            backoff *= 0.5 + random.random() / 2  # noqa: S311 - spreading retries, not security
        return backoff


def call_with_retry(
    call: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[TransientError, int, float], float] | None = None,
) -> T:
    """``call()``, retried on ``TransientError`` as ``policy`` says; the last error propagates.

    ``on_retry(error, retry_number, wait)`` runs before each wait (to log it, count it) and returns the
    seconds to sleep: ``wait``, or less when the caller waits elsewhere (the API budget's shared pause).
    """
    attempt = 0
    while True:
        try:
            return call()
        except TransientError as exc:
            wait = policy.delay(attempt, exc.retry_after)
            if wait is None:
                raise
            attempt += 1
            if on_retry is not None:
                wait = on_retry(exc, attempt, wait)
            if wait > 0:
                sleep(wait)
