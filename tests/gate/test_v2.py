"""Gate v2 (issue 17): scoped exceptions, strict rules, near groups, lexicon files, normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate import Gate, RulesError, load_rules, normalize, parse_rules

HEAD = """version = 1
[replies.weapons]
en = "No."
fr = "Non."
"""


def gate_of(text: str, **kwargs: object) -> Gate:
    return Gate(parse_rules(HEAD + text, source="t.toml", **kwargs))  # type: ignore[arg-type]


RULE = """
[[rules]]
id = "w"
category = "weapons"
patterns = ['\\bmake a bomb\\b']
exceptions = ['\\bgame\\b']
"""


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("make a bomb in my game", False),  # same clause: excused
        ("in my game, make a bomb", False),
        ("my game is great. make a bomb", True),  # another sentence
        ("make a bomb, unrelated to my game", True),  # a clause break between them
        ("my game has many features and a long list of levels to play, but make a bomb", True),
        ("make a bomb" + " xy" * 30 + " game", True),  # beyond the window
    ],
)
def test_an_exception_excuses_only_the_clause_of_the_match(text: str, hit: bool) -> None:
    assert gate_of(RULE).check(text).hit is hit


def test_every_match_must_be_excused() -> None:
    assert gate_of(RULE).check("make a bomb in my game. make a bomb").hit


def test_strict_rules_take_no_exceptions() -> None:
    with pytest.raises(RulesError, match=r"strict rule \(no benign reading\) takes no exceptions"):
        parse_rules(
            HEAD + RULE.replace('category = "weapons"', 'category = "weapons"\nstrict = true'), source="t"
        )
    strict = RULE.replace("exceptions = ['\\bgame\\b']\n", "strict = true\n")
    assert gate_of(strict).check("make a bomb in my game").hit
    with pytest.raises(RulesError, match="'strict' must be true or false"):
        parse_rules(
            HEAD + RULE.replace('category = "weapons"', 'category = "weapons"\nstrict = "yes"'), source="t"
        )


def test_a_strict_category_needs_strict_rules() -> None:
    text = 'strict_categories = ["weapons"]\n' + HEAD.replace("version = 1\n", "") + RULE
    with pytest.raises(RulesError, match="category 'weapons' is strict"):
        parse_rules("version = 1\n" + text, source="t")
    with pytest.raises(RulesError, match="'strict_categories' must list"):
        parse_rules(
            'version = 1\nstrict_categories = ["nope"]\n' + HEAD.replace("version = 1\n", "") + RULE,
            source="t",
        )


def test_unknown_top_level_keys_are_refused() -> None:
    with pytest.raises(RulesError, match="unknown top-level keys"):
        parse_rules("version = 1\nlexicon = 'x'\n" + HEAD.replace("version = 1\n", "") + RULE, source="t")


NEAR = """
[[rules]]
id = "n"
category = "weapons"
near_words = 3
near = [['\\bmake\\b', '\\bbombs?\\b']]
"""


@pytest.mark.parametrize(
    ("text", "hit"),
    [
        ("make a bomb", True),
        ("make a very big bomb", True),  # three words between
        ("make a very big loud bomb", False),  # four
        ("bombs: how do I make them", True),  # reordered
        ("make things. bomb", False),  # never across a sentence end
    ],
)
def test_near_groups_allow_bounded_gaps_in_any_order(text: str, hit: bool) -> None:
    assert gate_of(NEAR).check(text).hit is hit


def test_near_is_validated() -> None:
    with pytest.raises(RulesError, match="'near' must be a list of lists of two or three patterns"):
        parse_rules(
            HEAD + NEAR.replace("near = [['\\bmake\\b', '\\bbombs?\\b']]", "near = [['x']]"), source="t"
        )
    with pytest.raises(RulesError, match="'near_words' must be an integer from 0 to 20"):
        parse_rules(HEAD + NEAR.replace("near_words = 3", "near_words = 99"), source="t")


LEXICON = """
[drugs]
en = ["molly", "oxy*", "china white"]
fr = ["beuh"]
"""

LEX_RULE = """
[[rules]]
id = "d"
category = "weapons"
triggers = [["@lex_drugs"], ["buy"]]
patterns = ['\\bbuy\\b[^.!?]{0,20}{{lex_drugs}}']
"""


def test_lexicons_become_a_term_and_a_trigger_list(tmp_path: Path) -> None:
    (tmp_path / "lex.toml").write_text(LEXICON, encoding="utf-8")
    rules = tmp_path / "rules.toml"
    rules.write_text('version = 1\nlexicons = "lex.toml"\n' + HEAD.replace("version = 1\n", "") + LEX_RULE)
    gate = Gate(load_rules(rules))
    for text in ("buy molly", "buy some oxys", "buy China-White", "buy de la beuh"):
        assert gate.check(text).hit, text
    assert not gate.check("buy milk").hit
    group = gate.rules.rules[0].triggers[0]
    assert group.words >= {"moly", "china", "beuh"}
    assert "oxy" in group.prefixes


@pytest.mark.parametrize(
    ("lexicon", "reason"),
    [
        ("[drugs]\nde = ['x']\n", "unknown language 'de'"),
        ("[drugs]\nen = ['Molly']\n", "is not a lower-case word or phrase"),
        ("[drugs]\nen = 'molly'\n", "must be a list of strings"),
        ("drugs = 3\n", "must be a table of entry lists"),
        ("[drugs\n", "not valid TOML"),
    ],
)
def test_broken_lexicons_name_the_file(tmp_path: Path, lexicon: str, reason: str) -> None:
    (tmp_path / "lex.toml").write_text(lexicon, encoding="utf-8")
    rules = tmp_path / "rules.toml"
    rules.write_text('version = 1\nlexicons = "lex.toml"\n' + HEAD.replace("version = 1\n", "") + LEX_RULE)
    with pytest.raises(RulesError, match=r"lexicons 'lex\.toml'") as info:
        load_rules(rules)
    assert reason in str(info.value)


def test_a_lexicon_reference_needs_a_reader() -> None:
    with pytest.raises(RulesError, match="'lexicons' must name a file"):
        parse_rules(
            'version = 1\nlexicons = "lex.toml"\n' + HEAD.replace("version = 1\n", "") + RULE, source="t"
        )


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("h o w  t o  m a k e  a  b o m b", "how to make a bomb"),
        ("b. o. m. b", "bomb"),
        ("m- e- t- h", "meth"),
        ("ex-plo-sif", "explosif"),
        ("ma-ke a pi-pe bo-mb", "make a pipe bomb"),
        ("self-harm", "self-harm"),  # no short piece
        ("dis-moi", "dis-moi"),  # French pronoun
        ("mot-de-passe", "mot-de-pase"),
        ("i use c. then i go", "i use c. then i go"),
    ],
)
def test_normalisation_undoes_wide_spacing_and_hyphen_pieces(text: str, normalized: str) -> None:
    assert normalize(text) == normalized


def test_shipped_rules_have_the_new_categories_and_strict_rules() -> None:
    rules = load_rules()
    categories = {rule.category for rule in rules.rules}
    assert {"sexual_minors", "sexual", "extremism"} <= categories
    assert all(rule.strict for rule in rules.rules if rule.category == "sexual_minors")
    strict = {rule.id for rule in rules.rules if rule.strict}
    assert {
        "weapons.explosive-device",
        "weapons.chemical-biological",
        "self_harm.method-dose-place",
        "violence.poison-kill",
    } <= strict
    assert rules.replies["sexual_minors"].fr != rules.replies["sexual"].fr
    assert "119" in rules.replies["sexual_minors"].fr
    assert "findahelpline" in rules.replies["self_harm"].en
