"""Table-driven: every labelled question gets the expected decision from the shipped rules.

- ``cases.jsonl``: French and English, block and pass, obfuscations and benign look-alikes;
- ``heldout.jsonl``: other wordings of the same intents, written apart from the rules;
- ``blind-1.jsonl``, ``blind-2.jsonl``, ``blind-3.jsonl``: three sets written by someone who had
  not seen the rules (110 + 100 + 90 block, 90 + 80 + 70 pass, French and English). Each was scored
  before any rule was written for it; CHANGELOG.md's gate history gives those first figures. They
  are regression cases now. Where two categories overlap (a member's address: personal data or
  doxxing), the label is the category whose rule answers first;
- ``../shared/data/gate-probes-dev.jsonl`` (the project's probe file, beside the clone): every
  ``block`` probe hits and at most one ``pass`` probe does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from eval.bench.gate import FORUM, forum_questions
from gate import Gate, RuleSet

HERE = Path(__file__).parent
PROBES = Path(__file__).parents[2].parent / "shared" / "data" / "gate-probes-dev.jsonl"


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CASES = load(HERE / "cases.jsonl")
HELDOUT = load(HERE / "heldout.jsonl")
BLIND = [row for n in (1, 2, 3) for row in load(HERE / f"blind-{n}.jsonl")]
# Issue 17: one line per class of miss (scoped exceptions, strict categories, new categories, gaps,
# slang, normalisation), each labelled with its class; and the fifth blind set once it is scored.
V2 = load(HERE / "cases-v2.jsonl")
BLIND_5 = load(HERE / "blind-5.jsonl")


DECIDE_MS = 60_000
"""Regex budget for these tests: they compare decisions, and a pattern timing out under a loaded
machine changes a decision by design (``gate.matcher``); the budget has its own tests in
``test_matcher.py``."""


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate.load(timeout_ms=DECIDE_MS)


def test_labelled_files_are_well_formed() -> None:
    for rows in (CASES, HELDOUT, BLIND, V2):
        ids = [row["id"] for row in rows]
        assert len(ids) == len(set(ids))
        assert {row["expect"] for row in rows} == {"block", "pass"}
        assert all(("category" in row) == (row["expect"] == "block") for row in rows)
    blocked = {row["category"] for row in CASES if row["expect"] == "block"}
    assert len(blocked) == 9


@pytest.mark.parametrize("case", CASES + HELDOUT + BLIND + V2, ids=lambda case: str(case["id"]))
def test_labelled_case(gate: Gate, case: dict[str, Any]) -> None:
    decision = gate.check(case["text"])
    if case["expect"] == "block":
        assert decision.hit, case["text"]
        assert decision.category == case["category"]
        assert decision.reply == gate.rules.replies[case["category"]].text(decision.language)
    else:
        assert not decision.hit, f"{case['text']!r} hit {decision.rule_id}"
        if decision.kind == "support":  # not a refusal: the support reply instead of an answer
            assert decision.reply == gate.rules.replies["support"].text(decision.language)
        else:
            assert (decision.rule_id, decision.category, decision.reply) == (None, None, None)


@pytest.mark.parametrize("case", BLIND_5, ids=lambda case: str(case["id"]))
def test_blind_set_5_is_a_regression_set(gate: Gate, case: dict[str, Any]) -> None:
    # Scored once before any rule was written for it (CHANGELOG.md, gate history); its rules were then written
    # for the classes of its misses. Categories are the helper's labels ("other" was new), so only
    # the decision is compared, for the rules and the harmful lines the rules now block.
    decision = gate.check(case["text"])
    if case["expect"] == "pass":
        assert not decision.hit, f"{case['text']!r} hit {decision.rule_id}"
    elif case["id"] not in BLIND_5_RULES_MISS:
        assert decision.hit, case["text"]


BLIND_5_RULES_MISS = frozenset(
    {"g5-008", "g5-013", "g5-020", "g5-051", "g5-074", "g5-084", "g5-120", "g5-127", "g5-132"}
    | {"g5-136", "g5-158", "g5-159", "g5-176", "g5-191", "g5-219"}
)
"""Harmful lines of set 5 the rules still miss (left to the embedding layer, or to nothing)."""


def test_dev_probes() -> None:
    probes = load(PROBES)
    gate = Gate.load(timeout_ms=DECIDE_MS)
    missed = [p["id"] for p in probes if p["expect"] == "block" and not gate.check(p["text"]).hit]
    false_hits = [p["id"] for p in probes if p["expect"] == "pass" and gate.check(p["text"]).hit]
    assert missed == []
    assert len(false_hits) <= 1, false_hits
    assert sum(p["expect"] == "block" for p in probes) >= 30


@pytest.mark.slow
def test_triggers_never_change_a_decision(gate: Gate) -> None:
    """Triggers only skip rules that could not hit: the same decisions without them."""
    plain = RuleSet(
        source=gate.rules.source,
        rules=tuple(dataclasses.replace(rule, triggers=()) for rule in gate.rules.rules),
        replies=gate.rules.replies,
    )
    without = Gate(plain, lexical=gate.lexical, timeout_ms=DECIDE_MS)
    # Also the derived triggers of the rules written without any (gate.literals): every labelled
    # line, harmful and benign, and 300 forum questions, where most rules must be skipped.
    rows = CASES + HELDOUT + BLIND + V2 + BLIND_5 + load(PROBES)
    texts = [row["text"] for row in rows] + forum_questions(FORUM, limit=300)
    assert sum(not rule.triggers for rule in gate.rules.rules) == 0
    for text in texts:
        assert gate.check(text) == without.check(text), text


@pytest.mark.slow
def test_alternatives_never_change_a_decision(gate: Gate) -> None:
    """Each alternative of a rule tried alone at the word starts where its matches begin, in the
    sentences that hold its needs, decides like the rule's joined pattern scanned at every position:
    every labelled line, the training sets and 300 forum questions (``python -m eval.bench
    gate_decisions --archive`` checks the archive too)."""
    scanned = Gate(gate.rules, lexical=gate.lexical, timeout_ms=DECIDE_MS)
    assert sum(a is not None for a in scanned._alternatives) >= 50
    scanned._alternatives = [None] * len(gate.rules.rules)
    training = sorted((HERE.parents[1] / "eval" / "data" / "gate-train").glob("*.jsonl"))
    rows = CASES + HELDOUT + BLIND + V2 + BLIND_5 + load(PROBES) + [r for p in training for r in load(p)]
    for text in [row["text"] for row in rows] + forum_questions(FORUM, limit=300):
        assert gate.check(text) == scanned.check(text), text


HELD_OUT = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-4.jsonl")


def test_blind_set_4_keeps_its_recorded_floor(gate: Gate) -> None:
    # Scored once untuned (eval/data/gate-heldout/README.md); since issue 17's fourth session it is
    # the heads' training data too: the floor is what the rules scored on it when it was first run.
    harmful = [row for row in HELD_OUT if row["expect"] == "block"]
    harmless = [row for row in HELD_OUT if row["expect"] == "pass"]
    assert (len(harmful), len(harmless)) == (90, 70)
    blocked = sum(gate.check(row["text"]).hit for row in harmful)
    false_blocks = sum(gate.check(row["text"]).hit for row in harmless)
    assert blocked >= 57
    assert false_blocks <= 1


HELD_OUT_6 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-6.jsonl")


def assert_floor(
    gate: Gate, rows: list[dict[str, Any]], sizes: tuple[int, int], *, blocked: int, false_blocks: int
) -> None:
    """A held-out set's recorded floor: its (harmful, benign) sizes, at least ``blocked`` harmful lines
    blocked by ``Gate.check`` and at most ``false_blocks`` benign ones."""
    harmful = [row for row in rows if row["expect"] == "block"]
    harmless = [row for row in rows if row["expect"] == "pass"]
    assert (len(harmful), len(harmless)) == sizes
    assert sum(gate.check(row["text"]).hit for row in harmful) >= blocked
    assert sum(gate.check(row["text"]).hit for row in harmless) <= false_blocks


def test_blind_set_6_keeps_its_recorded_floor(gate: Gate) -> None:
    # Scored once by the rules of issue 17 (eval/data/gate-heldout/README.md); the heads' training
    # data since the fourth session: the floor is the rules' first score.
    assert_floor(gate, HELD_OUT_6, (125, 125), blocked=68, false_blocks=2)


HELD_OUT_7 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-7.jsonl")


def test_blind_set_7_keeps_what_its_tuning_reached(gate: Gate) -> None:
    # Scored once before tuning (97/131 with both layers, 5/133 false blocks;
    # eval/data/gate-heldout/README.md), then rules were written for the classes of its misses:
    # an in-sample floor now, against losing them again.
    assert_floor(gate, HELD_OUT_7, (131, 133), blocked=120, false_blocks=0)


HELD_OUT_8 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-8.jsonl")


def test_blind_set_8_keeps_its_recorded_floor(gate: Gate) -> None:
    # The lead's set of the second session, scored untuned twice (eval/data/gate-heldout/README.md);
    # the heads' training data since the fourth session: the floor is the rules' figures then.
    assert_floor(gate, HELD_OUT_8, (120, 128), blocked=67, false_blocks=2)


HELD_OUT_9 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-9.jsonl")


def test_blind_set_9_keeps_what_its_tuning_reached(gate: Gate) -> None:
    # Scored before tuning (rules 88/130 and 6/133 false blocks; rules and the lexical head 101/130;
    # eval/data/gate-heldout/README.md), then its false-block classes were fixed in the rules and its
    # lines became the lexical head's training data: an in-sample floor now.
    assert_floor(gate, HELD_OUT_9, (130, 133), blocked=FLOOR_9, false_blocks=0)


FLOOR_9 = 109


HELD_OUT_10 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-10.jsonl")


def test_untouched_blind_set_10_keeps_its_recorded_floor(gate: Gate) -> None:
    # The lead's set of issue 17's third session, never tuned on (eval/data/gate-heldout/README.md):
    # what the rules and the lexical head blocked on the final gate, so that a change losing ground on
    # unseen wordings fails.
    # 78 at the third session's end; 84 since the fourth session's training data (never fitted on it)
    assert_floor(gate, HELD_OUT_10, (130, 132), blocked=84, false_blocks=3)


HELD_OUT_11 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-11.jsonl")


def test_blind_set_11_keeps_what_its_tuning_reached(gate: Gate) -> None:
    # Scored once before tuning (all layers 95/130, 6/132 false blocks, all by rules;
    # eval/data/gate-heldout/README.md), then its false-block classes were fixed in the rules and its
    # lines became the heads' training data: an in-sample floor now (rules and the lexical head).
    assert_floor(gate, HELD_OUT_11, (130, 132), blocked=FLOOR_11, false_blocks=0)


FLOOR_11 = 107


HELD_OUT_12 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-12.jsonl")


def test_untouched_blind_set_12_keeps_its_recorded_floor(gate: Gate) -> None:
    # The lead's set of issue 17's fourth session, scored once on the final gate and never tuned on
    # (eval/data/gate-heldout/README.md): what the rules and the lexical head blocked then. The fifth
    # session's rules block one more of its benign lines (aggregate only; its rows were not read).
    assert_floor(gate, HELD_OUT_12, (130, 132), blocked=81, false_blocks=4)


HELD_OUT_13 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-13.jsonl")


def test_blind_set_13_keeps_its_recorded_floor(gate: Gate) -> None:
    # Issue 17's fifth session: a fresh set, scored once on the final gate (6cc5a20), what the rules
    # and the lexical head blocked then; training data since the sixth session (TUNED_HELDOUT), so
    # its figures are in sample from then on (eval/data/gate-heldout/README.md).
    assert_floor(gate, HELD_OUT_13, (130, 132), blocked=108, false_blocks=1)


HELD_OUT_14 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-14.jsonl")
HELD_OUT_15 = load(Path(__file__).parents[2] / "eval" / "data" / "gate-heldout" / "blind-15.jsonl")


def test_blind_sets_14_and_15_keep_their_recorded_floors(gate: Gate) -> None:
    # Issue 17's sixth session: two fresh sets held by the lead, scored once on the final gate
    # (021f892) and never tuned on until the eighth session, when they became training data
    # (TUNED_HELDOUT; eval/data/gate-heldout/README.md): what the rules and the lexical head
    # (Gate.check) blocked then, in sample since.
    assert_floor(gate, HELD_OUT_14, (130, 132), blocked=107, false_blocks=5)
    assert_floor(gate, HELD_OUT_15, (130, 132), blocked=115, false_blocks=2)
