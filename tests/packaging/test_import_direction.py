"""Imports go one way (docs/architecture.md): an import that runs back up fails here.

::

    tests           may import everything; nothing imports tests
      ▲
    worker.app      the applications: the CLI (cli, commands/), the composition root (assemble), the
      ▲             webhook app; may import every layer below
    eval            may import backfill, gate's build, the core of worker, gate, sanitizer
      ▲
    backfill        may import the core of worker, gate, sanitizer
      ▲
    gate's build    gate/build.py, manifest.py, train/ (``make gate``: refits the gate's artefacts; reads
      ▲             archive HTML and embeds lines with the core's clients): may import the core of worker
    worker (core)   everything in worker/ but app/: may import gate, sanitizer
      ▲             (worker.testing: only tests, eval, worker.app and itself)
    gate, sanitizer pure: import nothing of ours

Every import counts, the ones inside a function body too (a lazy import is still a dependency), and
there are no exceptions. A module named by a string (``importlib.import_module``, ``__import__``) counts
as an import of that module, so a dependency cannot hide in a string either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import ROOT

OURS = ("gate", "sanitizer", "worker", "backfill", "eval", "tests")
APP = "worker.app"
# The gate's build (``make gate``): a tool above the core, never imported by the gate at run time.
GATE_BUILD = "gate.build"
GATE_BUILD_MODULES = ("gate.build", "gate.manifest", "gate.train")
BELOW_APP = frozenset({"eval", "backfill", GATE_BUILD, "worker", "gate", "sanitizer"})
MAY_IMPORT: dict[str, frozenset[str]] = {
    "gate": frozenset({"gate"}),
    "sanitizer": frozenset({"sanitizer"}),
    "worker": frozenset({"worker", "gate", "sanitizer"}),
    GATE_BUILD: frozenset({GATE_BUILD, "worker", "gate", "sanitizer"}),
    "backfill": frozenset({"backfill", "worker", "gate", "sanitizer"}),
    "eval": frozenset({"eval", "backfill", GATE_BUILD, "worker", "gate", "sanitizer"}),
    APP: BELOW_APP | {APP},
    "tests": frozenset({*OURS, APP, GATE_BUILD}),
}
STRING_IMPORTS = frozenset({"import_module", "__import__"})


def layer(module: str) -> str:
    """The layer a dotted module name belongs to: ``worker.app`` apart from the rest of ``worker``."""
    if module == APP or module.startswith(APP + "."):
        return APP
    if any(module == m or module.startswith(m + ".") for m in GATE_BUILD_MODULES):
        return GATE_BUILD
    return module.split(".")[0]


def _named(node: ast.expr) -> str | None:
    """The module a string names: a literal, or the literal head of an f-string (``f"eval.bench.{x}"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.rstrip(".")
    return None


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every absolute import in the file, and every module named by a string
    to ``importlib.import_module`` or ``__import__``."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno
            for alias in node.names:  # ``from worker import app`` imports worker.app
                yield f"{node.module}.{alias.name}", node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield "<relative>", node.lineno
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            named = _named(node.args[0]) if name in STRING_IMPORTS else None
            if named:
                yield named, node.lineno


def _files(package: str) -> list[Path]:
    if package == GATE_BUILD:
        modules = [ROOT / "gate" / "build.py", ROOT / "gate" / "manifest.py"]
        return [*modules, *sorted((ROOT / "gate" / "train").rglob("*.py"))]
    folder = ROOT.joinpath(*package.split("."))
    found = [p for p in sorted(folder.rglob("*.py")) if ".venv" not in p.parts]
    if package == "worker":  # the core: worker/app/ is a layer of its own
        found = [p for p in found if p.relative_to(folder).parts[0] != "app"]
    if package == "gate":  # the gate at run time: its build is a layer of its own
        build = ("build.py", "manifest.py", "train")
        found = [p for p in found if p.relative_to(folder).parts[0] not in build]
    return found


def violations(package: str) -> list[str]:
    found = []
    for path in _files(package):
        where = path.relative_to(ROOT).as_posix()
        for module, line in _imports(path):
            if module == "<relative>":
                found.append(f"{where}:{line}: relative import (write the absolute one)")
            elif module.split(".")[0] in OURS and layer(module) not in MAY_IMPORT[package]:
                found.append(f"{where}:{line}: {package} imports {module}")
            elif (
                module.startswith("worker.testing")
                and package in {"worker", APP}
                and not where.startswith("worker/testing/")
            ):
                found.append(f"{where}:{line}: production code imports the fakes ({module})")
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_go_one_way(package: str) -> None:
    assert violations(package) == []


def test_every_file_of_ours_is_in_one_layer() -> None:
    """No package escapes the check: the layers' files are every Python file of the five packages."""
    checked = {p for package in MAY_IMPORT if package != "tests" for p in _files(package)}
    ours = {
        p
        for top in ("gate", "sanitizer", "worker", "backfill", "eval")
        for p in (ROOT / top).rglob("*.py")
        if ".venv" not in p.parts
    }
    assert ours - checked == set()
    assert (ROOT / "worker" / "app" / "cli.py") in checked


def test_the_check_sees_an_import_running_back_up(tmp_path: Path) -> None:
    """The checker itself: a lazy import of eval inside a worker function is found."""
    module = tmp_path / "bad.py"
    module.write_text("def handler():\n    from eval.stack.forum.app import create_forum_app\n", "utf-8")
    assert [m for m, _ in _imports(module)] == [
        "eval.stack.forum.app",
        "eval.stack.forum.app.create_forum_app",
    ]


def test_the_check_sees_a_module_named_by_a_string(tmp_path: Path) -> None:
    """A string import is an import: the core resolving ``backfill`` or ``worker.app`` by name is found."""
    module = tmp_path / "seam.py"
    module.write_text(
        "import importlib\n"
        "def run(name):\n"
        "    importlib.import_module('backfill.command')\n"
        "    return importlib.import_module(f'worker.app.commands.{name}')\n",
        "utf-8",
    )
    named = [m for m, _ in _imports(module)]
    assert named == ["importlib", "backfill.command", "worker.app.commands"]
    assert [layer(m) for m in named[1:]] == ["backfill", APP]
    assert not {layer(m) for m in named[1:]} <= MAY_IMPORT["worker"]
