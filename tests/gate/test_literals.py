"""Triggers derived from patterns (``gate.literals``, ``gate.rules.derived_triggers``): every set is
true of every match, so a rule without ``triggers`` is tried on fewer questions but decides the same."""

from __future__ import annotations

import random
import string

import pytest
import regex

from gate import Gate
from gate.literals import first_words, word_beginnings, word_needs
from gate.rules import PREFIX_HEAD, derived_triggers, parse_rules

REPLIES = '[replies.weapons]\nen = "no"\nfr = "non"\n'


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"\ba?bomb", {"abomb", "bomb"}),
        (r"\b(?:lethal|fatal)\b", {"letha", "fatal"}),
        (r"\bkil(?:l|ling)?\b", {"kil", "kill", "killi"}),
        (r"(?<!\bnot )(?:\bsex\b|\bporn\w*)", {"sex", "porn"}),
        (r"\b[1-3]\d? ans\b", {"1", "2", "3"}),
    ],
)
def test_word_beginnings_of_a_pattern(pattern: str, expected: set[str]) -> None:
    assert word_beginnings(pattern, PREFIX_HEAD) == expected


@pytest.mark.parametrize(
    "pattern",
    [
        r"bomb",  # may match inside a word ("abomb"): its word beginning is unknown
        r"\b\w+ bomb",  # starts with any word
        r"\b(?:bomb|\w+ite)",  # one alternative starts with any word
    ],
)
def test_no_beginnings_when_a_match_can_start_anywhere(pattern: str) -> None:
    assert word_beginnings(pattern, PREFIX_HEAD) is None


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


@pytest.mark.parametrize(
    ("pattern", "words", "prefixes"),
    [
        (r"\b(?:make|build)[^\w.!?]+(?:a[^\w.!?]+)?bomb", {"make", "build"}, set()),
        (r"\b(?:i|i'm|im|me)[^\w.!?]+(?:want|plan)", {"i", "im", "me"}, set()),  # "i'm": "i", then "'"
        (r"\bhow (?:many|much)\b", {"how"}, set()),
        (r"\bkil\w*|\bkil(?:ing)?\b", set(), {"kil"}),  # "kil" covers "kiling"
        (r"\b(?:lethal|fatal)\b|\bpsilocybin\w*", {"lethal", "fatal"}, {"psilocybin"}),
        (r"\bbomb[\s-]*(?:x|y)", set(), {"bomb"}),  # \s is no class the reading lists: a prefix
        (r"\b(?:a|an) (?:bomb|gun)s?\b", {"a", "an"}, set()),
    ],
)
def test_first_words_of_a_pattern(pattern: str, words: set[str], prefixes: set[str]) -> None:
    assert first_words(pattern) == (words, prefixes)


def test_no_first_words_where_no_beginnings() -> None:
    for pattern in (r"bomb", r"\b\w+ bomb", r"\b(?:bomb|\w+ite)"):
        assert first_words(pattern) is None, pattern


@pytest.mark.parametrize(
    "pattern",
    [
        r"\ba?bomb(?:e|es|s)?\b",
        r"\b(?:how (?:do|can) i|how to)[^\w.!?]+(?:\w+[^\w.!?]+){0,2}?(?:groom|lure)\w*",
        r"\b(?:[1-9]|1[0-7])[- ]?(?:years?|yo)\b|\bkids?\b",
        r"\b(?:i|i'm|im)[^\w.!?]+(?:\w+[^\w.!?]+){0,2}?(?:want|plan)\b|\bkil\w*",
    ],
)
def test_every_match_starts_at_one_of_its_first_words(pattern: str) -> None:
    """Property check: every match (of ``finditer``, and of ``match`` at any word start) starts at a
    word that is one of the first words or begins with one of the prefixes."""
    rng = random.Random(19)
    words = [*regex.findall(r"[a-z]+", pattern), "1", "12", "12yo", "abomb", "x", "i'm", "kiler"]
    compiled = regex.compile(pattern)
    found = first_words(pattern)
    assert found is not None
    whole, prefixes = found
    matched = 0
    for _ in range(3000):
        text = _random_text(rng, words)
        for word in regex.finditer(r"\w+", text):
            if compiled.match(text, word.start()):
                matched += 1
                assert word.group() in whole or word.group().startswith(tuple(prefixes)), (text, word)
    assert matched >= 5
