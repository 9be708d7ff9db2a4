"""Helpers shared by command modules: settings and logging from the parsed arguments."""

from __future__ import annotations

import argparse

from worker.logs import configure_logging
from worker.settings import Settings, load_settings


def settings_from(args: argparse.Namespace) -> Settings:
    """Load settings (raising ConfigError with the variable's name) and configure logging."""
    settings = load_settings()
    level = "DEBUG" if getattr(args, "verbose", False) else settings.log_level
    configure_logging(level, json_lines=settings.log_json)
    return settings
