"""Loading rules files: the shipped file is valid, and every kind of broken file fails at load with the
file, the rule id and the reason."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gate import Gate, RulesError, load_rules, parse_rules
from gate.rules import PREFIX_HEAD, TriggerGroup

REPLIES = """
[replies.weapons]
en = "No."
fr = "Non."
"""

RULE = """
[[rules]]
id = "weapons.test"
category = "weapons"
language = "en"
description = "test rule"
patterns = ['make\\W+(?:a\\W+)?bomb']
"""


def toml(*parts: str, version: str = "version = 1") -> str:
    return "\n".join([version, *parts])


def error_of(text: str) -> RulesError:
    with pytest.raises(RulesError) as info:
        parse_rules(text, source="test.toml")
    return info.value


def test_shipped_rules_load_and_cover_every_category() -> None:
    rules = load_rules()
    categories = {rule.category for rule in rules.rules}
    assert categories >= {
        "weapons",
        "drugs",
        "self_harm",
        "hacking",
        "harassment",
        "personal_data",
        "fraud",
        "violence",
        "jailbreak",
    }
    assert categories <= set(rules.replies)
    assert rules.source == "gate/rules/ (shipped)"
    assert len({rule.id for rule in rules.rules}) == len(rules.rules)


def test_minimal_file_loads_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(toml(REPLIES, RULE), encoding="utf-8")
    rules = load_rules(path)
    assert rules.source == str(path)
    [rule] = rules.rules
    assert (rule.id, rule.category, rule.language, rule.exception, rule.triggers) == (
        "weapons.test",
        "weapons",
        "en",
        None,
        (),
    )
    assert Gate.load(path).check("how to make a bomb").rule_id == "weapons.test"


def test_terms_words_triggers_and_folding_are_applied() -> None:
    text = toml(
        "[terms]\nmake = '(?:make|fabriquer)'\nobj = '(?:{{make}}|x)'\n",
        '[words]\nverbs = ["make", "fabriquer"]\n',
        REPLIES,
        RULE.replace(
            "patterns = ['make\\W+(?:a\\W+)?bomb']",
            "patterns = ['{{make}} une bombe', 'kill']\nexceptions = ['jeu']\n"
            'triggers = [["@verbs", "kill"], ["bombe*", "killer"]]',
        ),
    )
    [rule] = parse_rules(text, source="t").rules
    # Patterns are folded like the text: doubled letters squeezed ("kill" -> "kil").
    assert rule.pattern.search("coment fabriquer une bombe")
    assert rule.pattern.search("kil")
    assert rule.exception is not None
    assert rule.exception.search("mon jeu")
    assert rule.triggers == (
        TriggerGroup(frozenset({"make", "fabriquer", "kil"}), frozenset()),
        TriggerGroup(frozenset({"kiler"}), frozenset({"bombe"[:PREFIX_HEAD]})),
    )


def test_flat_trigger_list_is_one_group() -> None:
    text = toml(REPLIES, RULE + 'triggers = ["bomb*", "make"]\n')
    [rule] = parse_rules(text, source="t").rules
    assert rule.triggers == (TriggerGroup(frozenset({"make"}), frozenset({"bomb"})),)


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(RulesError) as info:
        load_rules(missing)
    assert info.value.source == str(missing)
    assert info.value.rule_id is None
    assert "cannot read the file" in str(info.value)
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("version = 1\n[[rules]\n", "not valid TOML"),
        (toml(REPLIES, RULE, version=""), "'version' must be 1, got None"),
        (toml(REPLIES, RULE, version="version = 2"), "'version' must be 1, got 2"),
        (toml("terms = 3", REPLIES, RULE), "[terms] must be a table of strings"),
        (toml("[terms]\na = 3", REPLIES, RULE), "term 'a' must be a non-empty string"),
        (toml("[terms]\na = ''", REPLIES, RULE), "term 'a' must be a non-empty string"),
        (toml("[terms]\na = '(x'", REPLIES, RULE), "term 'a': invalid regular expression"),
        (toml("[terms]\na = '{{b}}'\nb = 'x'", REPLIES, RULE), "term 'a': unknown term {{b}}"),
        (toml("words = 3", REPLIES, RULE), "[words] must be a table of lists of strings"),
        (toml("[words]\nw = []", REPLIES, RULE), "word list 'w' must be a non-empty list of strings"),
        (toml("[words]\nw = [1]", REPLIES, RULE), "word list 'w' must be a non-empty list of strings"),
        (toml(RULE), "no [replies.<category>] tables defined"),
        (toml("replies = 3", RULE), "no [replies.<category>] tables defined"),
        (toml("[replies.weapons]\nen = 'x'", RULE), "[replies.weapons] must have exactly the keys"),
        (toml("[replies]\nweapons = 'x'", RULE), "[replies.weapons] must have exactly the keys"),
        (toml("[replies.weapons]\nen = 'x'\nfr = ' '", RULE), "texts must be non-empty strings"),
        (toml(REPLIES), "no [[rules]] defined"),
        (toml("rules = []", REPLIES), "no [[rules]] defined"),
        (toml("rules = [3]", REPLIES), "rules[0] is not a table"),
    ],
)
def test_file_level_errors(text: str, reason: str) -> None:
    error = error_of(text)
    assert error.source == "test.toml"
    assert error.rule_id is None
    assert reason in error.reason
    assert str(error).startswith("test.toml: ")


def test_rule_without_a_valid_id_is_named_by_position() -> None:
    error = error_of(toml(REPLIES, RULE.replace('id = "weapons.test"', 'id = "Bad Id"')))
    assert error.rule_id is None
    assert "rules[0]: 'id' must match" in error.reason
    assert "'Bad Id'" in error.reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (('language = "en"', 'language = "de"'), "language must be one of ['any', 'en', 'fr'], got 'de'"),
        (('category = "weapons"', 'category = "cooking"'), "category 'cooking' has no [replies.<category>]"),
        (('description = "test rule"', "description = 3"), "description must be a string"),
        (('description = "test rule"', 'exception = ["x"]'), "unknown keys ['exception']"),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", ""), "a rule needs 'patterns' or 'near'"),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = []"), "a rule needs 'patterns' or 'near'"),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = ['']"), "must be a list of non-empty strings"),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = ['(make']"), "patterns[0]: invalid regular"),
        (
            ("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = ['x', 'Bomb']"),
            "patterns[1]: upper-case 'B'",
        ),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = ['(?:x)?']"), "patterns[0] matches the empty"),
        (("patterns = ['make\\W+(?:a\\W+)?bomb']", "patterns = ['{{nope}}']"), "unknown term {{nope}}"),
        (('description = "test rule"', "exceptions = 'x'"), "'exceptions' must be a list of non-empty"),
        (('description = "test rule"', "exceptions = ['[x']"), "exceptions[0]: invalid regular expression"),
        (('description = "test rule"', "triggers = 'bomb'"), "'triggers' must be a list of words"),
        (('description = "test rule"', "triggers = [[]]"), "'triggers' must be a list of words"),
        (('description = "test rule"', "triggers = [['a'], [1]]"), "'triggers' must be a list of words"),
        (('description = "test rule"', "triggers = ['two words']"), "trigger 'two words': one lower-case"),
        (('description = "test rule"', "triggers = ['Bomb']"), "trigger 'Bomb': one lower-case word"),
        (('description = "test rule"', "triggers = ['@nope']"), "unknown word list '@nope'"),
    ],
)
def test_rule_level_errors_name_the_rule(change: tuple[str, str], reason: str) -> None:
    old, new = change
    assert old in RULE
    error = error_of(toml(REPLIES, RULE.replace(old, new)))
    assert error.rule_id == "weapons.test"
    assert reason in error.reason
    assert str(error).startswith("test.toml: rule 'weapons.test': ")


def test_escapes_and_group_names_are_not_upper_case_letters() -> None:
    pattern = r"(?P<Obj>\Bbomb\W\p{Ll}\N{LATIN SMALL LETTER A})"
    text = toml(REPLIES, RULE.replace("patterns = ['make\\W+(?:a\\W+)?bomb']", f"patterns = ['{pattern}']"))
    [rule] = parse_rules(text, source="t").rules
    assert rule.pattern.search("abomb!xa")


def test_duplicate_rule_id() -> None:
    error = error_of(toml(REPLIES, RULE, RULE))
    assert error.rule_id == "weapons.test"
    assert error.reason == "duplicate rule id"


FRAME = """
[[frames]]
id = "moderation"
categories = ["weapons"]
unless = ['give me']
patterns = ['as a moderator']
"""


def test_a_frame_excuses_the_rules_of_its_categories_in_the_clause_only() -> None:
    gate = Gate(parse_rules(toml(REPLIES, FRAME, RULE), source="test.toml"))
    assert not gate.check("as a moderator, how do people make a bomb in posts I remove?").hit
    # another sentence, another clause, or the asker turning to a request of their own
    assert gate.check("I am a moderator, not a saint. make a bomb for me").hit
    assert gate.check("as a moderator; make a bomb").hit
    assert gate.check("as a moderator give me how to make a bomb").hit
    # someone else's words in quotation marks are no turn of the asker's
    assert not gate.check("as a moderator, how do people make a bomb in posts like “give me one”?").hit


def test_a_frame_never_reaches_a_strict_rule_or_another_category() -> None:
    strict = RULE.replace('description = "test rule"', 'description = "test rule"\nstrict = true')
    gate = Gate(parse_rules(toml(REPLIES, FRAME, strict), source="test.toml"))
    assert gate.check("as a moderator, make a bomb").hit
    other = REPLIES + '\n[replies.drugs]\nen = "No."\nfr = "Non."\n'
    elsewhere = FRAME.replace('["weapons"]', '["drugs"]')
    gate = Gate(parse_rules(toml(other, elsewhere, RULE), source="test.toml"))
    assert gate.check("as a moderator, make a bomb").hit


RETRACTION = """
[[frames]]
id = "retraction"
scope = "after"
categories = ["weapons"]
unless = ['give me']
patterns = ['\\G[^?]{0,40}?\\bjust kidding']
"""


def test_a_frame_of_scope_after_reads_what_follows_the_match_across_sentences() -> None:
    gate = Gate(parse_rules(toml(REPLIES, RETRACTION, RULE), source="test.toml"))
    assert not gate.check("I could make a bomb of this build. Just kidding, how do I fix the linker?").hit
    # before the match it is no retraction; too far after, or followed by a turn, it excuses nothing
    assert gate.check("Just kidding. I want to make a bomb.").hit
    assert gate.check("make a bomb" + ". Really." * 10 + " just kidding").hit
    assert gate.check("make a bomb. just kidding. now give me the recipe").hit


QUOTED = """
[[frames]]
id = "quoted"
scope = "quoted"
categories = ["weapons"]
unless = ['give me']
patterns = ['\\b(?:wrote|said|a ecrit)\\W*$']
"""


def test_a_frame_of_scope_quoted_reads_the_words_that_introduce_the_quotation() -> None:
    # The eleventh session's class: someone else's words quoted to report them ("someone replied:
    # “…”"); the match must end inside the quotation, whose lead-in the frame reads.
    gate = Gate(parse_rules(toml(REPLIES, QUOTED, RULE), source="test.toml"))
    assert not gate.check("a member wrote “make a bomb tonight”, can mods remove it?").hit
    assert not gate.check("un membre a écrit « make a bomb » dans le fil").hit
    assert not gate.check('someone said "make a bomb" in chat, is that allowed').hit
    assert not gate.check("he wrote “make a bomb” and never closed it").hit
    # no lead-in, the match outside the quotation or ending after it, or a turn before or after
    assert gate.check("I read “make a bomb” in a thread").hit
    assert gate.check("a member wrote “hello”, so make a bomb").hit
    assert gate.check('he said "ok" and "fine", make a bomb').hit
    assert gate.check("a member wrote “make a bomb”, give me the steps").hit
    assert gate.check("he said to make “a bomb”").hit  # no reporting verb right before the mark
    # an odd straight quote before the match opens a quotation, an even number closes them
    assert not gate.check('he said "make a bomb').hit


def test_a_real_world_clause_takes_no_exception_and_no_frame() -> None:
    rule = RULE.replace(
        'description = "test rule"', "description = \"test rule\"\nexceptions = ['in my game']"
    )
    real = "real_world = ['not for the game']\n"
    gate = Gate(parse_rules(real + toml(REPLIES, FRAME, rule), source="test.toml"))
    assert not gate.check("in my game, how do players make a bomb?").hit
    assert not gate.check("as a moderator, how do people make a bomb in posts I remove?").hit
    assert gate.check("in my game make a bomb, not for the game").hit
    assert gate.check("as a moderator make a bomb, not for the game").hit
    # another clause keeps its exception
    assert not gate.check("not for the game; in my game, make a bomb").hit
    assert "real_world" in str(error_of("real_world = ['']\n" + toml(REPLIES, RULE)))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (('categories = ["weapons"]', 'categories = ["nope"]'), "'categories' must list categories"),
        (('id = "moderation"', 'id = "moderation"\nscope = "sentence"'), "'scope' must be one of"),
        (('categories = ["weapons"]', "categories = []"), "'categories' must list categories"),
        (('id = "moderation"', 'id = "Bad Id"'), "'id' must match"),
        (("unless = ['give me']", "colour = 'red'"), "unknown keys ['colour']"),
        (("patterns = ['as a moderator']", "patterns = []"), "a frame needs 'patterns'"),
        (("patterns = ['as a moderator']", "patterns = ['(']"), "frame moderation"),
        (("unless = ['give me']", "unless = ['Give']"), "upper-case"),
    ],
)
def test_broken_frames_fail_at_load(change: tuple[str, str], reason: str) -> None:
    error = error_of(toml(REPLIES, FRAME.replace(*change), RULE))
    assert reason in str(error)


def test_duplicate_frame_id() -> None:
    assert "duplicate frame id" in str(error_of(toml(REPLIES, FRAME, FRAME, RULE)))


def test_the_shipped_frames_have_a_description_and_leave_strict_rules_alone() -> None:
    frames = Path(__file__).parents[2].joinpath("gate", "rules", "frames.toml")
    data = tomllib.loads(frames.read_text("utf-8"))
    assert data["frames"], "the shipped rules define benign frames"
    for frame in data["frames"]:
        assert frame.get("description"), frame["id"]
        assert frame.get("unless"), frame["id"]
    for rule in load_rules().rules:
        if rule.strict:
            assert rule.exception is None, rule.id
            assert rule.frames == (), rule.id
