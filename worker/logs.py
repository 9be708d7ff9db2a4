"""Logging set-up for entry points: plain lines for people, JSON lines for production."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import ClassVar

_STD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the ``extra=`` fields (post_id, stage, duration_ms…) kept."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger: message key=value…`` with the extra fields appended."""

    default_msec_format: ClassVar[str] = "%s.%03d"  # type: ignore[misc]

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = [
            f"{k}={v}" for k, v in vars(record).items() if k not in _STD_ATTRS and not k.startswith("_")
        ]
        return text + (" " + " ".join(extras) if extras else "")


class BrokerOutageFilter(logging.Filter):
    """dramatiq logs a CRITICAL line per queue consumer every few seconds while Redis is down (six lines
    every 3 s for a worker of three queues). This lets one through a minute, as a WARNING that says what
    happens meanwhile, and drops the rest; everything else passes untouched."""

    PREFIX = "Consumer encountered a connection error"

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._last: float | None = None
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("dramatiq") or not str(record.msg).startswith(self.PREFIX):
            return True
        now = self.clock()
        if self._last is not None and now - self._last < self.every_s:
            self._dropped += 1
            return False
        self._last = now
        cause = record.getMessage().removeprefix(self.PREFIX).lstrip(": ")
        record.msg = "Redis unreachable (%s); the worker keeps retrying (%d similar lines since the last one)"
        record.args = (cause, self._dropped)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info = None
        self._dropped = 0
        return True


def configure_logging(level: str = "INFO", *, json_lines: bool = False) -> None:
    """Install one stderr handler on the root logger (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_citebot", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    handler._citebot = True  # type: ignore[attr-defined]
    handler.addFilter(BrokerOutageFilter())
    root.addHandler(handler)
    root.setLevel(level)
    # Third-party chatter stays at WARNING unless we debug.
    for noisy in ("httpx", "httpcore", "dramatiq", "urllib3", "sentence_transformers", "filelock"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
