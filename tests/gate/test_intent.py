"""The embedding layer (gate/intent.py): nearest labelled exemplars, a fixed threshold, its file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gate import IntentError, IntentLayer
from gate.intent import exemplars_digest, exemplars_text


def unit(*values: float) -> list[float]:
    v = np.asarray(values, dtype=np.float64)
    return list(v / np.linalg.norm(v))


def small() -> IntentLayer:
    return IntentLayer(
        model="test/model",
        harmful=[unit(1, 0, 0), unit(0.9, 0.1, 0), unit(0, 0, 1)],
        labels=["weapons", "weapons", "drugs"],
        benign=[unit(0, 1, 0), unit(0.1, 0.9, 0)],
        k=1,
        threshold=0.3,
    )


def test_a_question_near_harmful_exemplars_hits_with_their_category() -> None:
    decision = small().check(unit(1, 0.05, 0))
    assert decision.hit
    assert decision.category == "weapons"
    assert decision.score >= decision.threshold == 0.3


def test_a_question_near_benign_look_alikes_passes() -> None:
    decision = small().check(unit(0.5, 0.8, 0))
    assert not decision.hit
    assert decision.score < 0.3


def test_the_decision_is_deterministic() -> None:
    layer = small()
    assert {layer.check(unit(0.2, 0.3, 0.9)) for _ in range(5)} == {layer.check(unit(0.2, 0.3, 0.9))}


def test_a_vector_of_another_size_is_refused() -> None:
    with pytest.raises(IntentError, match="takes 3-d vectors of test/model"):
        small().check([1.0, 0.0])


def test_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(small().to_json()), encoding="utf-8")
    loaded = IntentLayer.load(path)
    assert loaded.labels == small().labels
    before, after = small().check(unit(1, 0.05, 0)), loaded.check(unit(1, 0.05, 0))
    assert (after.hit, after.category) == (before.hit, before.category)
    assert after.score == pytest.approx(before.score, abs=1e-3)  # vectors are stored as float16


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"version": 2}, "'version' must be 1"),
        ({"k": 9}, "k must be between 1"),
        ({"labels": ["weapons"]}, "one harmful category per harmful exemplar"),
        ({"harmful": "!!"}, "malformed exemplars file"),
        ({"dimension": 2}, "whole number of 2-d rows"),
    ],
)
def test_a_broken_file_is_refused_with_the_reason(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    data = small().to_json() | change
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IntentError, match=reason):
        IntentLayer.load(path)


def test_no_shipped_exemplars_for_an_unknown_model() -> None:
    with pytest.raises(IntentError, match="no intent exemplars for embedding model 'other/model'"):
        IntentLayer.load(model="other/model")


def test_the_shipped_layer_matches_the_shipped_exemplars() -> None:
    layer = IntentLayer.load()
    rows = [json.loads(line) for line in exemplars_text().splitlines() if line.strip()]
    assert layer.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert layer.dimension == 384
    assert layer.exemplars_sha256 == exemplars_digest(exemplars_text())
    assert len(layer.labels) == sum(r["label"] != "benign" for r in rows)
    assert layer.benign.shape[0] == sum(r["label"] == "benign" for r in rows)
    assert {r["lang"] for r in rows} == {"en", "fr"}
    assert set(layer.categories) >= {"weapons", "drugs", "self_harm", "sexual_minors", "sexual", "extremism"}


def test_exemplars_are_not_copied_from_the_labelled_sets() -> None:
    texts = {json.loads(line)["text"].casefold() for line in exemplars_text().splitlines() if line.strip()}
    here = Path(__file__).parent
    sets = [*here.glob("*.jsonl"), *(here.parents[1] / "eval" / "data" / "gate-heldout").glob("*.jsonl")]
    for path in sets:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                assert json.loads(line)["text"].casefold() not in texts, path.name
