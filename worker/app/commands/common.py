"""Helpers shared by command modules: settings and logging from the parsed arguments."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from collections.abc import Callable
from types import FrameType

from worker.logs import configure_logging
from worker.settings import Settings, load_settings, unknown_env_names

log = logging.getLogger(__name__)


def settings_from(args: argparse.Namespace) -> Settings:
    """Load settings (raising ConfigError with the variable's name) and configure logging."""
    settings = load_settings()
    level = "DEBUG" if getattr(args, "verbose", False) else settings.log_level
    configure_logging(level, json_lines=settings.log_json)
    for line in unknown_env_names(os.environ):
        log.warning("%s; it is ignored (docs/configuration.md lists the settings)", line)
    return settings


def stoppable(
    run: Callable[[Settings, argparse.Namespace], int], settings: Settings, args: argparse.Namespace
) -> int:
    """``run(settings, args)`` with SIGTERM (an orchestrator's stop) raising ``KeyboardInterrupt`` as
    Ctrl-C does, so that a long run saves what it finished; the previous handler is restored after."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(settings, args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def preflight(settings: Settings, *, index: bool = True, redis: bool = False) -> None:
    """What an entry point checks before it starts: the database, its schema and (``index``) the post
    index's model against the configured one, and (``redis``) Redis. One line per failure."""
    from worker.db.check import check_database

    check_database(settings.database, settings.embeddings, index=index)
    if redis:
        from worker.broker import check_redis

        check_redis(settings.redis)
