"""The ``citebot`` command: one parser over the command groups of ``worker.app.commands``.

Each command group is one module in ``worker/app/commands/`` that defines ``NAME``, ``HELP`` and
``register(parser)``; ``COMMANDS`` lists them, and this file wires them together. A group backed by
``backfill`` or ``eval`` (both below ``worker.app``) imports that package inside its handler, so that
a command pays only for its own imports.
Errors become one line on stderr and an exit code: 2 for configuration, 1 for everything else, 141
(quietly) when the reader of stdout went away.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from worker.app.commands import (
    answers,
    ask,
    backfill,
    calibrate,
    db,
    flags,
    forum,
    models,
    poll,
    sanitize,
    webhook,
)
from worker.app.commands import gate as gate_group
from worker.app.commands import worker as worker_group
from worker.errors import CitebotError, ConfigError

log = logging.getLogger(__name__)


# Every command group, in the order of ``citebot --help``.
COMMANDS: tuple[ModuleType, ...] = (
    answers,
    ask,
    backfill,
    calibrate,
    db,
    flags,
    forum,
    gate_group,
    models,
    poll,
    sanitize,
    webhook,
    worker_group,
)


Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="citebot",
        description="A Discourse bot that answers members from the forum's own history, with citations.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG (includes forum text)")
    parser.add_argument("--version", action="version", version=f"citebot {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        group = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.register(group)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("citebot")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without installing
        return "unknown (not installed)"


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
    except BrokenPipeError:
        # The reader went away (`citebot ask … | head`): exit quietly, as cat and grep do. Python would
        # otherwise report the broken pipe again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
