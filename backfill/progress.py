"""Progress of a run: a tqdm bar with rate and ETA on a terminal, a log line every so often otherwise."""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)


class Progress:
    """Counts posts seen; ``interactive`` None means: a bar when stderr is a terminal."""

    def __init__(
        self, total: int | None, *, interactive: bool | None = None, every_s: float = 30.0, label: str = ""
    ) -> None:
        self.total = total
        self.done = 0
        self.every_s = every_s
        self.label = label
        self._start = time.monotonic()
        self._last_log = self._start
        self._bar: Any = None
        if interactive is None:
            interactive = sys.stderr.isatty()
        if interactive:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(total=total, unit="post", desc=label or "backfill", smoothing=0.05)

    def update(self, n: int, **postfix: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            return
        now = time.monotonic()
        if now - self._last_log >= self.every_s:
            self._last_log = now
            log.info("%s", self.line(), extra={k: v for k, v in postfix.items()})

    def line(self) -> str:
        elapsed = max(1e-9, time.monotonic() - self._start)
        rate = self.done / elapsed
        if self.total:
            left = max(0, self.total - self.done)
            eta = left / rate if rate > 0 else float("inf")
            pct = 100.0 * self.done / self.total
            return (
                f"{self.label} {self.done}/{self.total} posts ({pct:.1f}%), "
                f"{rate:.0f} posts/s, ETA {eta:.0f} s"
            )
        return f"{self.label} {self.done} posts, {rate:.0f} posts/s"

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
