"""Progress of a run: a tqdm bar with rate and ETA on a terminal, a log line every so often otherwise.

The run advances it per embedding batch (tens of posts), not per committed page (a thousand), so the
rate and the ETA show within the first seconds; posts that need no embedding (unchanged, ineligible)
count as soon as their page is read. Embedding threads call :meth:`Progress.advance`, hence the lock.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)


class Progress:
    """Counts posts seen; ``interactive`` None means: a bar when stderr is a terminal.

    Without a bar, the first log line comes ``first_s`` after the start and then one every ``every_s``.
    ``unit`` names what is counted (``citebot calibrate`` counts questions) and ``counted`` the two
    tallies the bar shows beside it (``advance``'s ``embedded`` and ``skipped``).
    """

    def __init__(
        self,
        total: int | None,
        *,
        interactive: bool | None = None,
        every_s: float = 30.0,
        first_s: float = 3.0,
        label: str = "",
        unit: str = "post",
        counted: tuple[str, str] = ("embedded", "skipped"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.unit = unit
        self.counted = counted
        self.done = 0
        self.embedded = 0
        self.skipped = 0
        self.every_s = every_s
        self.label = label
        self._clock = clock
        self._start = clock()
        self._next_log = self._start + first_s
        self._lock = threading.Lock()
        self._bar: Any = None
        if interactive is None:
            interactive = sys.stderr.isatty()
        if interactive:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(total=total, unit=unit, desc=label or "backfill", smoothing=0.05)

    def advance(self, seen: int, *, embedded: int = 0, skipped: int = 0) -> None:
        """``seen`` more posts handled, of which ``embedded`` were embedded and ``skipped`` unchanged."""
        with self._lock:
            self.done += seen
            self.embedded += embedded
            self.skipped += skipped
            if self._bar is not None:
                self._bar.set_postfix(
                    dict(zip(self.counted, (self.embedded, self.skipped), strict=True)), refresh=False
                )
                self._bar.update(seen)
                return
            now = self._clock()
            if now < self._next_log:
                return
            self._next_log = now + self.every_s
            line = self.line()
        log.info("%s", line, extra=dict(zip(self.counted, (self.embedded, self.skipped), strict=True)))

    def line(self) -> str:
        elapsed = max(1e-9, self._clock() - self._start)
        rate = self.done / elapsed
        if self.total:
            left = max(0, self.total - self.done)
            eta = left / rate if rate > 0 else float("inf")
            pct = 100.0 * self.done / self.total
            return (
                f"{self.label} {self.done}/{self.total} {self.unit}s ({pct:.1f}%), "
                f"{rate:.1f} {self.unit}s/s, ETA {_duration(eta)}"
            )
        return f"{self.label} {self.done} {self.unit}s, {rate:.1f} {self.unit}s/s"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 05 min``; ``?`` before the first post."""
    if seconds == float("inf"):
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
