"""The ``citebot`` command: the composition root.

Each command group lives in its own module exposing ``register(subparsers)``; this file only wires
them together. Command modules are imported by name so that groups backed by ``backfill`` or
``eval`` (which import ``worker``, never the reverse) are loaded only when a command needs them.
Errors become one line on stderr and an exit code: 2 for configuration, 1 for everything else.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from worker.errors import CitebotError, ConfigError

log = logging.getLogger(__name__)

# (group name, module, help). Order is the order of `citebot --help`.
COMMAND_MODULES: tuple[tuple[str, str, str], ...] = (
    ("db", "worker.commands.db", "database schema: migrate, status"),
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="citebot",
        description="A Discourse bot that answers members from the forum's own history, with citations.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG (includes forum text)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module, help_text in COMMAND_MODULES:
        group = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).register(group)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.parse_args([*(argv or sys.argv[1:]), "--help"])
        return 2
    try:
        return handler(args)
    except ConfigError as exc:
        print(f"citebot: configuration error: {exc}", file=sys.stderr)
        return 2
    except CitebotError as exc:
        print(f"citebot: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("citebot: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
