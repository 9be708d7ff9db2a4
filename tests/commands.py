"""Parse a command line the way the program would, without running it (deploy files, docs)."""

from __future__ import annotations

import argparse

from eval.__main__ import parser as eval_parser
from eval.bench.__main__ import BENCHES
from worker.app.cli import build_parser


def parse_command(program: str, argv: list[str]) -> None:
    """Parse ``argv`` for ``citebot``, ``python -m eval`` or ``python -m eval.bench``; SystemExit if bad.

    A benchmark's own arguments are checked where its module exposes ``parse``; otherwise only its name.
    """
    if program == "citebot":
        args = build_parser().parse_args(argv)
        if not callable(getattr(args, "handler", None)):
            raise SystemExit(f"citebot {' '.join(argv)}: no command")
    elif program == "python -m eval":
        eval_parser().parse_args(argv)
    elif program == "python -m eval.bench":
        if not argv or argv[0] not in BENCHES:
            raise SystemExit(f"unknown benchmark {argv[:1]}")
        parse = getattr(BENCHES[argv[0]], "parse", None)
        if parse is not None and not isinstance(parse(argv[1:]), argparse.Namespace):
            raise SystemExit(f"eval.bench {argv[0]}: bad arguments")
    else:
        raise ValueError(f"unknown program {program!r}")
