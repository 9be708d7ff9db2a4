"""``citebot gate check``: run the intent gate over JSON Lines questions.

Input (stdin): one JSON object per line with a string ``text``; other fields are kept as they are.
Output (stdout): each object written back, in order, with ``hit`` (bool), ``rule`` (id or null) and
``category`` (or null) added. Blank lines are skipped.

A bad line (not JSON, not an object, no string ``text``) does not stop the run: it is reported on
stderr with its line number, written to stdout as ``{"line": N, "error": "...", "hit": null,
"rule": null, "category": null}`` so outputs stay aligned with inputs, and the exit status is 1 at
the end (0 when every line was good). A broken rules file exits 2 with the file, rule and reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from gate import Gate, RulesError
from worker.app.commands.common import settings_from
from worker.errors import ConfigError

NAME = "gate"
HELP = "intent gate: check questions against the rules"
_NO_DECISION: dict[str, object] = {"hit": None, "rule": None, "category": None}


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="gate_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "check",
        help="read JSON Lines {text} on stdin, write them back with hit, rule and category",
        description="Read JSON Lines on stdin (objects with a string `text`) and write each back on "
        "stdout, in order, with `hit`, `rule` and `category` added. A bad line is reported on stderr, "
        "written as an error object, and makes the exit status 1.",
    )
    p.add_argument(
        "--rules",
        type=Path,
        default=None,
        help="rules file (default: CITEBOT_GATE__RULES_PATH, else the shipped rules)",
    )
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    path = args.rules if args.rules is not None else settings.gate.rules_path
    try:
        gate = Gate.load(
            path,
            timeout_ms=settings.gate.timeout_ms,
            max_chars=settings.gate.max_chars,
            lexical=settings.gate.lexical,
        )
    except RulesError as exc:
        raise ConfigError(f"invalid gate rules: {exc}") from None
    return run_check(gate, sys.stdin, sys.stdout, sys.stderr)


def run_check(gate: Gate, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """The loop behind ``gate check``; returns the exit status (1 when any line was bad)."""
    bad = 0
    for number, line in enumerate(stdin, start=1):
        if not line.strip():
            continue
        parsed = _parse(line)
        if isinstance(parsed, str):
            bad += 1
            print(f"citebot gate check: line {number}: {parsed}", file=stderr)
            row: dict[str, object] = {"line": number, "error": parsed, **_NO_DECISION}
        else:
            row, text = parsed
            decision = gate.check(text)
            row.update(hit=decision.hit, rule=decision.rule_id, category=decision.category)
        stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
        stdout.flush()
    return 1 if bad else 0


def _parse(line: str) -> tuple[dict[str, object], str] | str:
    """The object and its text, or the reason the line is unusable."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    text = row.get("text")
    if not isinstance(text, str):
        return "the object has no string field 'text'"
    return row, text
