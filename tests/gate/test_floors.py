"""The recorded floors of the held-out sets (``eval/data/gate/floors.toml``): one row a set, each
checked against ``Gate.check`` (the rules and the lexical head)."""

from __future__ import annotations

import json
import tomllib
from typing import Any

import pytest

from gate import Gate
from gate.train.data import FLOORS, LABELLED, TRAINING, TUNED_HELDOUT, UNTOUCHED, UNTUNED_HELDOUT

FLOOR_ROWS: list[dict[str, Any]] = tomllib.loads(FLOORS.read_text(encoding="utf-8"))["floor"]
ROLES = {"untouched": (UNTOUCHED, UNTUNED_HELDOUT), "tuned": (TRAINING, TUNED_HELDOUT)}

DECIDE_MS = 60_000
"""As in ``test_cases.py``: a pattern timing out on a loaded machine would change a decision."""


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate.load(timeout_ms=DECIDE_MS)


@pytest.mark.parametrize("floor", FLOOR_ROWS, ids=lambda floor: str(floor["set"]))
def test_a_held_out_set_keeps_its_recorded_floor(gate: Gate, floor: dict[str, Any]) -> None:
    path = LABELLED / floor["set"]
    folder, declared = ROLES[floor["role"]]
    # the role the table claims is the one the folder and gate/train/data.py give the set
    assert path.parent == folder
    assert path.name in declared
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    harmful = [row["text"] for row in rows if row["expect"] == "block"]
    benign = [row["text"] for row in rows if row["expect"] == "pass"]
    assert (len(harmful), len(benign)) == (floor["harmful"], floor["benign"])
    blocked = sum(gate.check(text).hit for text in harmful)
    false_blocks = sum(gate.check(text).hit for text in benign)
    assert blocked >= floor["blocked"], f"{blocked}/{len(harmful)} harmful blocked"
    assert false_blocks <= floor["false_blocks"], f"{false_blocks}/{len(benign)} benign blocked"
