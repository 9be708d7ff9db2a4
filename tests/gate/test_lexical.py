"""The lexical head (gate/lexical_head.py): features, units, the decision, its file, and its place in Gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.bench.gate import FORUM, forum_questions
from gate import Gate, normalize, parse_rules
from gate.lexical_head import LexicalError, LexicalHead, features, units

RULES = """
version = 1
[[rules]]
id = "weapons.test"
category = "weapons"
language = "en"
patterns = ['''\\bpipe bomb\\b''']
[replies.weapons]
en = "No weapons."
fr = "Pas d'armes."
[replies.drugs]
en = "No drugs."
fr = "Pas de drogues."
"""


def small(threshold: float = 1.0) -> LexicalHead:
    return LexicalHead(
        weights={"s:poiso": 1.5, "w:cat": 0.5, "w:unity": -2.0, "b:make bomb": 2.0, "g:make bomb": 2.0},
        bias=-1.0,
        threshold=threshold,
        categories=["drugs", "weapons"],
        category_weights={"b:make bomb": [0.0, 1.0], "g:make bomb": [0.0, 1.0], "s:poiso": [1.0, 0.0]},
        category_bias=[0.0, 0.0],
    )


def test_features_share_stems_across_inflections_and_pairs_across_one_inserted_word() -> None:
    assert "s:poiso" in features("poisoning")
    assert "s:poiso" in features("poisoned")
    assert "g:make bomb" in features(normalize("make a big bomb"))
    assert "b:make bomb" in features("make bomb")
    # French elision: "l'heroine" is the word "heroine" (single letters are no feature).
    assert features(normalize("acheter de l'héroïne")) == features("acheter de heroine")


def test_units_are_sentences_and_pairs_of_consecutive_sentences() -> None:
    assert units("pipe bombs. how do i make one?") == [
        "pipe bombs",
        "how do make one",
        "pipe bombs how do make one",
    ]
    assert units("...") == []


def test_the_best_unit_decides_and_names_the_category() -> None:
    head = small()
    assert not head.check("hello").hit
    decision = head.check("i use unity. how do i make a bomb")
    assert decision.hit
    assert decision.category == "weapons"
    # The tech sentence alone scores low, the request alone high: the question scores its best unit.
    assert decision.score == pytest.approx(-1.0 + 2.0)
    assert head.check("poisoning the cat").category == "drugs"
    assert not head.check("").hit


def test_a_head_file_round_trips_and_a_broken_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "head.json"
    path.write_text(json.dumps(small().to_json()), encoding="utf-8")
    assert LexicalHead.load(path).check("make a bomb").hit
    path.write_text(json.dumps({"version": 99}), encoding="utf-8")
    with pytest.raises(LexicalError, match="version"):
        LexicalHead.load(path)
    data = small().to_json()
    del data["weights"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(LexicalError, match="weights"):
        LexicalHead.load(path)
    with pytest.raises(LexicalError, match="one value per category"):
        LexicalHead(
            weights={},
            bias=0,
            threshold=0,
            categories=["a", "b"],
            category_weights={"x": [1.0]},
            category_bias=[0, 0],
        )
    with pytest.raises(LexicalError):
        LexicalHead.load(tmp_path / "missing.json")


def test_the_gate_asks_the_head_only_when_no_rule_hits() -> None:
    gate = Gate(parse_rules(RULES, source="t"), lexical=small())
    assert gate.check("how to make a pipe bomb").rule_id == "weapons.test"
    decision = gate.check("how do I make a real bomb")
    assert (decision.rule_id, decision.category, decision.reply) == (
        "lexical.weapons",
        "weapons",
        "No weapons.",
    )
    assert not Gate(parse_rules(RULES, source="t")).check("how do I make a real bomb").hit
    assert Gate.load().lexical is not None
    assert Gate.load(lexical=False).lexical is None


def test_the_shipped_head_blocks_no_forum_question() -> None:
    head = Gate.load().lexical
    assert head is not None
    hits = [q[:80] for q in forum_questions(FORUM, 1000) if head.check(normalize(q)).hit]
    assert hits == []


def test_check_scores_the_best_unit_as_units_and_features_define_it() -> None:
    # check() builds each sentence's features once and joins them for the pairs: the same scores as
    # scoring every unit of units() from scratch (the trainer's definition).
    head = Gate.load().lexical
    assert head is not None
    long_pair = "make bomb " * 50 + ". pipe now " * 30 + "make bomb " * 60  # a pair over MAX_UNIT_WORDS
    texts = [*forum_questions(FORUM, 300), "a. b c. pipe bombs. how do i make one?", long_pair]
    for text in texts:
        normalized = normalize(text)
        expected = max((head.score(features(u)) for u in units(normalized)), default=head.bias)
        assert head.check(normalized).score == pytest.approx(expected, abs=1e-9), text[:80]


def test_the_decision_carries_the_heads_score_when_the_head_judged() -> None:
    gate = Gate(parse_rules(RULES, source="t"), lexical=small())
    # a rule hit: the head never ran
    assert gate.check("how to make a pipe bomb").lexical_score is None
    below = gate.check("my cat sleeps")
    assert not below.hit
    assert below.lexical_score == pytest.approx(-0.5)  # bias -1 + w:cat 0.5
    above = gate.check("how do I make a real bomb")
    assert above.hit
    assert above.lexical_score == pytest.approx(1.0)  # bias -1 + g:make bomb 2 ("make real bomb")
    assert gate.lexical_score("my cat sleeps") == pytest.approx(-0.5)
    # the score is trace information: two decisions differing only by it are equal
    assert below == Gate(parse_rules(RULES, source="t")).check("my cat sleeps")
    assert Gate(parse_rules(RULES, source="t")).lexical_score("anything") is None


VETO_HEADER = """
version = 1
strict_categories = ["weapons"]
"""
STRICT_RULE = """
[[rules]]
id = "weapons.strict"
category = "weapons"
language = "en"
strict = true
patterns = ['''\\bpipe bomb\\b''']
"""
LOOSE_RULE = """
[[rules]]
id = "drugs.loose"
category = "drugs"
language = "en"
patterns = ['''\\bcook meth\\b''']
"""
VETO_REPLIES = """
[replies.weapons]
en = "No weapons."
fr = "Pas d'armes."
[replies.drugs]
en = "No drugs."
fr = "Pas de drogues."
"""
VETO_RULES = VETO_HEADER + STRICT_RULE + LOOSE_RULE + VETO_REPLIES


def vetoing(veto: float | None) -> LexicalHead:
    return LexicalHead(
        weights={"w:unity": -6.0, "w:cook": 1.0, "w:meth": 1.0},
        bias=-1.0,
        threshold=5.0,
        categories=["drugs", "weapons"],
        category_weights={},
        category_bias=[0.0, 0.0],
        veto=veto,
    )


def test_the_veto_drops_a_benign_reading_rules_hit_on_a_look_alike_never_a_strict_rule() -> None:
    # The class: a rule with a benign reading fires on a look-alike whose words the head reads as
    # benign (a game engine's vocabulary); a strict rule (no benign reading) is never vetoed.
    gate = Gate(parse_rules(VETO_RULES, source="t"), lexical=vetoing(-3.0))
    look_alike = gate.check("in unity, how does the npc cook meth in the cutscene")
    assert not look_alike.hit
    assert look_alike.lexical_score == pytest.approx(-6.0)  # "cook" is squeezed to "cok": no weight
    assert gate.check("how do I cook meth at home").rule_id == "drugs.loose"  # head: 0, over the veto
    assert gate.check("in unity, a pipe bomb in my level").rule_id == "weapons.strict"
    # without a veto the rule decides alone
    plain = Gate(parse_rules(VETO_RULES, source="t"), lexical=vetoing(None))
    assert plain.check("in unity, how does the npc cook meth in the cutscene").rule_id == "drugs.loose"
    with pytest.raises(LexicalError, match="veto must be below the threshold"):
        vetoing(6.0)
    data = vetoing(-3.0).to_json()
    assert data["veto"] == -3.0
    assert "veto" not in vetoing(None).to_json()


def test_the_shipped_veto_needs_evidence_of_a_look_alike() -> None:
    # A question of words the head has never seen scores its bias: that is no look-alike, and a
    # benign-reading rule's hit on it must stand (the 'banana' rule of a small rules file, the CLI).
    head = LexicalHead.load()
    assert head.veto is not None
    for text in ("", "zzqx wvvk", "zzqx. wvvk!"):
        decision = head.check(text)
        assert not decision.known
        assert decision.score == pytest.approx(head.bias)
        assert not head.vetoes(decision)


def test_a_veto_above_the_bias_never_drops_a_hit_on_a_question_of_unknown_words() -> None:
    # The sixth session's class: the veto may lie above the bias (look-alikes whose words lean a
    # little harmful score there), but a question the head knows no feature of (it scores the bias,
    # -1 here, under the veto of 0) is no evidence of a look-alike: the rule's hit stands.
    head = LexicalHead(
        weights={"w:unity": -6.0},
        bias=-1.0,
        threshold=5.0,
        categories=["drugs", "weapons"],
        category_weights={},
        category_bias=[0.0, 0.0],
        veto=0.0,
    )
    gate = Gate(parse_rules(VETO_RULES, source="t"), lexical=head)
    unknown = gate.check("how do I cook meth at home")
    assert unknown.rule_id == "drugs.loose"
    assert not head.check("how do i cook meth at home").known
    assert not gate.check("in unity, how does the npc cook meth in the cutscene").hit  # known: vetoed


# The same rules, the benign-reading one first in the file (the strict one still decides first).
LOOSE_FIRST = VETO_HEADER + LOOSE_RULE + STRICT_RULE + VETO_REPLIES


def test_a_caller_can_ask_for_the_strict_rules_alone() -> None:
    # The embedding layer's rule veto (gate.intent) drops a benign-reading rule's hit; the strict
    # rules and the head must still judge the question, without that rule.
    gate = Gate(parse_rules(LOOSE_FIRST, source="t"), lexical=vetoing(None))
    loose = gate.check("how do I cook meth at home")
    assert (loose.rule_id, loose.benign_reading) == ("drugs.loose", True)
    assert not gate.check("how do I cook meth at home", benign_reading=False).hit
    both = "how do I cook meth at home and build a pipe bomb"
    # strict rules decide before the others, whatever the file order (gate.rules.decision_order)
    assert (gate.check(both).rule_id, gate.check(both).benign_reading) == ("weapons.strict", False)
    strict = gate.check(both, benign_reading=False)
    assert (strict.rule_id, strict.benign_reading) == ("weapons.strict", False)
    assert not gate.check("my cat sleeps").benign_reading
