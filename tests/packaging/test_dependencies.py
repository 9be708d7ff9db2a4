"""What the code imports is what pyproject.toml declares, and constraints.txt pins all of it.

A module that only arrives as somebody else's dependency (``markdown_it`` came with ``rich``) works until
that package drops it; a constraints file that no longer satisfies pyproject.toml's ranges makes
``make venv`` fail on a clean clone. Both are caught here instead.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.services import ROOT

PACKAGES = ("worker", "gate", "sanitizer", "backfill", "eval", "tests")
LOCK = ROOT / "constraints.txt"


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))


def _declared() -> list[Requirement]:
    """Every requirement of the distribution and its extras, self-references (``citebot[x]``) left out."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    return [r for r in map(Requirement, lines) if canonicalize_name(r.name) != "citebot"]


def _with_extras(requirements: list[Requirement]) -> set[str]:
    """Declared distribution names plus what their requested extras pull in (``psycopg[pool]``)."""
    names = {canonicalize_name(r.name) for r in requirements}
    for req in requirements:
        for extra in req.extras:
            for line in metadata.requires(req.name) or []:
                dep = Requirement(line)
                if dep.marker is not None and dep.marker.evaluate({"extra": extra}):
                    names.add(canonicalize_name(dep.name))
    return names


def _imported_modules() -> Iterator[tuple[str, str]]:
    """(top-level module, file) for every absolute import in our packages, inside functions too."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ".venv" in path.parts or path.is_relative_to(ROOT / "eval" / "data"):
                continue  # eval/data: the scripts a dataset's writer used, kept as written (no imports)
            tree = ast.parse(path.read_text("utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        yield alias.name.split(".")[0], str(path.relative_to(ROOT))
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    yield node.module.split(".")[0], str(path.relative_to(ROOT))


def test_every_third_party_import_is_declared() -> None:
    declared = _with_extras(_declared())
    providers = metadata.packages_distributions()
    missing: dict[str, set[str]] = {}
    for module, where in _imported_modules():
        if module in sys.stdlib_module_names or module in PACKAGES or module == "__future__":
            continue
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists & declared:
            missing.setdefault(f"{module} (from {sorted(dists) or 'nothing installed'})", set()).add(where)
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(
        f"{module} in {', '.join(sorted(files)[:3])}" for module, files in sorted(missing.items())
    )


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate(LOCK.read_text("utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
        assert match, f"constraints.txt:{number}: not an exact pin: {line!r}"
        pins[canonicalize_name(match[1])] = Version(match[2])
    return pins


def test_the_lock_pins_every_declared_dependency_within_its_range() -> None:
    pins = _pins()
    problems: list[str] = []
    linux = {"sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    for req in _declared():
        if req.marker is not None and not Marker(str(req.marker)).evaluate(linux):
            continue
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req.name} is not pinned")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req.name}=={pins[name]} is outside {req.specifier}")
    assert not problems, "constraints.txt is stale (run `make lock`): " + "; ".join(problems)


def test_the_installed_environment_is_the_locked_one() -> None:
    """The venv the tests run in was installed from the lock (a hand-installed upgrade shows here)."""
    pins = _pins()
    drift = []
    for name, version in pins.items():
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue  # a platform-specific pin of another machine
        if Version(installed.public) != version:
            drift.append(f"{name} {installed} (locked {version})")
    assert not drift, "installed versions differ from constraints.txt (run `make venv`): " + ", ".join(drift)
