"""Imports go one way (docs/architecture.md): an import that runs back up fails here.

::

    gate, sanitizer      pure: import nothing of ours
          ▲
    worker               may import gate, sanitizer (worker.testing: only tests, eval and itself)
          ▲
    backfill             may import worker, gate, sanitizer
          ▲
    eval                 may import all of the above
          ▲
    tests                may import everything; nothing imports tests

Every import counts, the ones inside a function body too (a lazy import is still a dependency), and
there are no exceptions. What ``worker`` runs from above it (the development doubles of ``eval.stack``
behind ``citebot forum|models serve``, the index stack and the bulk backfill of ``backfill``) it names in
``worker/seams.py`` and resolves by name when it runs; each of those names is checked to resolve here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import ROOT
from worker.seams import SEAMS, resolve

OURS = ("gate", "sanitizer", "worker", "backfill", "eval", "tests")
MAY_IMPORT: dict[str, frozenset[str]] = {
    "gate": frozenset({"gate"}),
    "sanitizer": frozenset({"sanitizer"}),
    "worker": frozenset({"worker", "gate", "sanitizer"}),
    "backfill": frozenset({"backfill", "worker", "gate", "sanitizer"}),
    "eval": frozenset({"eval", "backfill", "worker", "gate", "sanitizer"}),
    "tests": frozenset(OURS),
}


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every absolute import in the file."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield "<relative>", node.lineno


def _files(package: str) -> list[Path]:
    return [p for p in sorted((ROOT / package).rglob("*.py")) if ".venv" not in p.parts]


def violations(package: str) -> list[str]:
    found = []
    for path in _files(package):
        where = path.relative_to(ROOT).as_posix()
        for module, line in _imports(path):
            top = module.split(".")[0]
            if module == "<relative>":
                found.append(f"{where}:{line}: relative import (write the absolute one)")
            elif top in OURS and top not in MAY_IMPORT[package]:
                found.append(f"{where}:{line}: {package} imports {module}")
            elif (
                module.startswith("worker.testing")
                and package == "worker"
                and not where.startswith("worker/testing/")
            ):
                found.append(f"{where}:{line}: production code imports the fakes ({module})")
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_go_one_way(package: str) -> None:
    assert violations(package) == []


@pytest.mark.parametrize("ref", SEAMS)
def test_every_named_seam_resolves_to_code_above_worker(ref: str) -> None:
    """A renamed or moved target fails here, not when the command or the actor first runs."""
    assert ref.split(".")[0] in {"backfill", "eval"}
    assert callable(resolve(ref))


def test_the_check_sees_an_import_running_back_up(tmp_path: Path) -> None:
    """The checker itself: a lazy import of eval inside a worker function is found."""
    module = tmp_path / "bad.py"
    module.write_text("def handler():\n    from eval.stack.forum.app import create_forum_app\n", "utf-8")
    assert [m for m, _ in _imports(module)] == ["eval.stack.forum.app"]
