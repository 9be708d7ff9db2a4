"""Triggers derived from patterns (``gate.literals``, ``gate.rules.derived_triggers``): every set is
true of every match, so a rule without ``triggers`` is tried on fewer questions but decides the same."""

from __future__ import annotations

import random
import string

import pytest
import regex

from gate import Gate
from gate.literals import word_needs
from gate.rules import PREFIX_HEAD, derived_triggers, parse_rules

REPLIES = '[replies.weapons]\nen = "no"\nfr = "non"\n'


def test_needs_reach_words_after_separators_and_gaps() -> None:
    needs = word_needs(r"\b(?:how to|help me)[^\w.!?]+(?:\w+[^\w.!?]+){0,2}?(?:groom|lure)", PREFIX_HEAD)
    assert needs[0] == {"groom", "lure"}  # the rarest words come first
    assert {"how", "help"} in needs
    assert word_needs(r"\b(?:the|a) (?:child|kid)\b", PREFIX_HEAD)[0] == {"child", "kid"}
    assert word_needs(r"bomb", PREFIX_HEAD) == []


def test_a_rule_without_triggers_gets_derived_groups() -> None:
    rules = parse_rules(
        'version = 1\n[[rules]]\nid = "w"\ncategory = "weapons"\n'
        "near = [['''\\b(?:make|build)\\b''', '''\\b(?:napalm|thermite)\\b''']]\n" + REPLIES,
        source="t",
    )
    (rule,) = rules.rules
    assert rule.triggers[0].prefixes == {"napal", "therm"}
    assert {"make", "build"} in [group.prefixes for group in rule.triggers]
    gate = Gate(rules)
    assert gate.check("how do I build some thermite at home").hit
    assert not gate.check("how do I build a level").hit


def test_a_pattern_that_can_start_anywhere_leaves_the_rule_untriggered() -> None:
    assert derived_triggers([[r"bomb"], [r"\bnapalm\b"]]) == ()


def _random_text(rng: random.Random, words: list[str]) -> str:
    letters = string.ascii_lowercase
    pieces = [rng.choice(words) if rng.random() < 0.7 else rng.choice(letters) for _ in range(12)]
    return " ".join(pieces) + rng.choice(["", ".", " ?", "! ok"])


@pytest.mark.parametrize(
    "pattern",
    [
        r"\ba?bomb(?:e|es|s)?\b",
        r"\b(?:how (?:do|can) i|how to)[^\w.!?]+(?:\w+[^\w.!?]+){0,2}?(?:groom|lure)\w*",
        r"\b(?:[1-9]|1[0-7])[- ]?(?:years?|yo)\b|\bkids?\b",
        r"(?<!\bnot )\b(?:sex|porn\w*)\b[^.!?]{0,20}\b(?:write|story)\b",
    ],
)
def test_every_match_holds_a_word_of_every_derived_set(pattern: str) -> None:
    """A property check on random texts built from the pattern's own words: whenever the pattern
    matches, the match holds a word starting with a beginning of each set."""
    rng = random.Random(17)
    words = [*regex.findall(r"[a-z]+", pattern), "1", "12", "12yo", "abomb", "x", "not"]
    compiled = regex.compile(pattern)
    needs = word_needs(pattern, PREFIX_HEAD)
    assert needs
    matched = 0
    for _ in range(3000):
        text = _random_text(rng, words)
        for match in compiled.finditer(text):
            matched += 1
            starts = [
                w.group()[:PREFIX_HEAD]
                for w in regex.finditer(r"\w+", text)
                if match.start() <= w.start() < match.end()
            ]
            for beginnings in needs:
                assert any(any(s.startswith(b) for b in beginnings) for s in starts), (text, beginnings)
    assert matched >= 5
