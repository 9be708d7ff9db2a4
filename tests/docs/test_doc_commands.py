"""Every command line shown in a fenced code block of the docs parses with the code's own parsers.

Docs drift silently: an option renamed in code keeps its old spelling in a runbook until an operator
types it during an incident. This reads the code blocks of README.md, docs/ and the READMEs under
eval/ and deploy/, and parses each `citebot …`, `python -m eval …` and `python -m eval.bench NAME …`
line without running it. Optional parts written as `[--flag VALUE]` are dropped (the line is parsed in
its shortest form), comments and shell redirections are cut off, and lines that show output are skipped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.commands import parse_command
from tests.services import ROOT

DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "eval").rglob("README.md")),
    *sorted((ROOT / "deploy").rglob("README.md")),
]
_COMMAND = re.compile(r"\s*(?:\$ )?(?:\S*/)?(?:\.venv/bin/)?(citebot|python -m eval(?:\.bench)?)(?=\s|$)(.*)")


def _code_lines(path: Path) -> list[tuple[str, str]]:
    """(where, line) for each line of the fenced code blocks, `\\` continuations joined."""
    lines: list[tuple[str, str]] = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(path.read_text("utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            inside, pending = not inside, ""
            continue
        if not inside:
            continue
        if pending:
            line = pending + " " + line.strip()
        else:
            start = number
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1]
            continue
        pending = ""
        lines.append((f"{path.relative_to(ROOT)}:{start}", line))
    return lines


def _commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for path in DOCS:
        for where, line in _code_lines(path):
            m = _COMMAND.match(line)
            if m is None:
                continue
            rest = re.split(r"\s#|\s[<>|]|\s&&", m.group(2), maxsplit=1)[0]
            rest = re.sub(r"\[[^\[\]]*\]", "", rest)  # optional parts: parse the shortest form
            found.append((where, m.group(1), shlex.split(rest)))
    return found


COMMANDS = _commands()


def test_the_docs_show_commands() -> None:
    programs = {program for _, program, _ in COMMANDS}
    assert programs == {"citebot", "python -m eval", "python -m eval.bench"}
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize(("where", "program", "argv"), COMMANDS, ids=[w for w, _, _ in COMMANDS])
def test_every_command_in_the_docs_parses(where: str, program: str, argv: list[str]) -> None:
    parse_command(program, argv)


def test_a_renamed_option_would_fail() -> None:
    with pytest.raises(SystemExit):
        parse_command("citebot", ["backfill", "--origin", "file"])
