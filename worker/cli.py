"""The ``citebot`` command: the composition root.

Each command group is one module in ``worker/commands/`` that defines ``NAME``, ``HELP`` and
``register(parser)``; this file discovers them and wires them together. A group backed by ``backfill``
or ``eval`` (which import ``worker``, never the reverse) imports that package inside its handler, so
the dependency exists only at the composition root and only when that command runs.
Errors become one line on stderr and an exit code: 2 for configuration, 1 for everything else, 141
(quietly) when the reader of stdout went away.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from worker.errors import CitebotError, ConfigError

log = logging.getLogger(__name__)


def command_modules() -> list[ModuleType]:
    """Every module of ``worker.commands`` that declares a command group, sorted by name."""
    import worker.commands

    found = []
    for info in pkgutil.iter_modules(worker.commands.__path__):
        module = importlib.import_module(f"worker.commands.{info.name}")
        if hasattr(module, "register") and hasattr(module, "NAME"):
            found.append(module)
    return sorted(found, key=lambda m: str(m.NAME))


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
    for module in command_modules():
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
