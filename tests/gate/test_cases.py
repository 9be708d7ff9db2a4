"""Table-driven: every labelled question gets the expected decision from the shipped rules.

The sets are in ``eval/data/gate/training/`` (its README gives each set's role and history):

- ``cases.jsonl``: French and English, block and pass, obfuscations and benign look-alikes;
- ``heldout.jsonl``: other wordings of the same intents, written apart from the rules;
- ``blind-1.jsonl``, ``blind-2.jsonl``, ``blind-3.jsonl``: three sets written by someone who had
  not seen the rules (110 + 100 + 90 block, 90 + 80 + 70 pass, French and English). Each was scored
  before any rule was written for it; CHANGELOG.md's gate history gives those first figures. They
  are regression cases now. Where two categories overlap (a member's address: personal data or
  doxxing), the label is the category whose rule answers first;
- ``../shared/data/gate-probes-dev.jsonl`` (the project's probe file, beside the clone): every
  ``block`` probe hits and at most one ``pass`` probe does.

The held-out sets' floors are one table, ``eval/data/gate/floors.toml`` (``test_floors.py``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from eval.bench.gate import FORUM, forum_questions
from gate import Gate, RuleSet
from gate.train.data import PROBES, TRAINING, written_files


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CASES = load(TRAINING / "cases.jsonl")
HELDOUT = load(TRAINING / "heldout.jsonl")
BLIND = [row for n in (1, 2, 3) for row in load(TRAINING / f"blind-{n}.jsonl")]
# Issue 17: one line per class of miss (scoped exceptions, strict categories, new categories, gaps,
# slang, normalisation), each labelled with its class; and the fifth blind set once it is scored.
V2 = load(TRAINING / "cases-v2.jsonl")
BLIND_5 = load(TRAINING / "blind-5.jsonl")


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
    training = [row for path in written_files() for row in load(path)]
    rows = CASES + HELDOUT + BLIND + V2 + BLIND_5 + load(PROBES) + training
    for text in [row["text"] for row in rows] + forum_questions(FORUM, limit=300):
        assert gate.check(text) == scanned.check(text), text
