"""The shipped rules as a folder (``gate/rules/``): one file per category, ids that name the intent,
each rule's own examples, and decisions that the order of the files and of the rules inside them
never changes (``gate.rules.decision_order``)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from eval.bench.gate_decisions import labelled_lines
from gate import Gate, RulesError, load_rules, parse_rules
from gate.rules import Rule, RuleSet, decision_order, parse_rule_files

FOLDER = Path(__file__).parents[2] / "gate" / "rules"
SHIPPED = load_rules()
DECIDE_MS = 60_000
"""Regex budget: these tests compare decisions, which a timeout on a loaded machine would change."""


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate.load(timeout_ms=DECIDE_MS)


def test_each_category_has_its_own_file_and_names_its_rules_after_it() -> None:
    for rule in SHIPPED.rules:
        assert Path(rule.source).name == f"{rule.category}.toml", rule.id
        assert rule.id.startswith(f"{rule.category}."), rule.id
        # an id names what the rule covers, not when it was added (a "-v6" suffix, a ".more")
        assert not re.search(r"-v\d+$|\.(?:more|any)(?:-|$)", rule.id), rule.id
    files = {path.stem for path in FOLDER.glob("*.toml")}
    assert files == set(SHIPPED.replies) | {"common", "frames", "lexicons"}
    assert set(SHIPPED.precedence) == {rule.category for rule in SHIPPED.rules}


def test_every_rule_has_examples_of_both_kinds() -> None:
    for rule in SHIPPED.rules:
        assert rule.examples_block, f"{rule.id}: no examples.block"
        assert rule.examples_pass, f"{rule.id}: no examples.pass"


@pytest.mark.parametrize("rule", SHIPPED.rules, ids=lambda rule: rule.id)
def test_a_rule_blocks_its_block_examples_under_its_own_id(gate: Gate, rule: Rule) -> None:
    for text in rule.examples_block:
        decision = gate.check(text)
        assert (decision.hit, decision.rule_id) == (True, rule.id), text


@pytest.mark.parametrize("rule", SHIPPED.rules, ids=lambda rule: rule.id)
def test_a_rule_passes_its_pass_examples(gate: Gate, rule: Rule) -> None:
    alone = Gate(RuleSet(SHIPPED.source, (rule,), SHIPPED.replies, SHIPPED.real_world), timeout_ms=DECIDE_MS)
    for text in rule.examples_pass:
        assert not alone.check(text).hit, f"{rule.id} hits {text!r}"
        decision = gate.check(text)
        assert not decision.hit, f"{text!r}: the gate blocks it under {decision.rule_id}"


# --- order --------------------------------------------------------------------------------------

_RULE_START = re.compile(r"^(?=(?:#[^\n]*\n)*\[\[rules\]\])", re.MULTILINE)


def shuffled_files(seed: int) -> list[tuple[str, str]]:
    """The shipped files in a random order, the ``[[rules]]`` of each in a random order (each rule
    moved with the comment lines above it)."""
    rng = random.Random(seed)
    files = []
    for path in sorted(FOLDER.glob("*.toml")):
        text = path.read_text(encoding="utf-8")
        head, *pieces = _RULE_START.split(text)
        rules: list[str] = []
        carry = ""
        for piece in pieces:  # the comment lines above a rule come one a piece: keep them with it
            if "[[rules]]" not in piece:
                carry += piece
                continue
            rules.append(carry + piece)
            carry = ""
        rules = [rule if rule.endswith("\n\n") else rule.rstrip("\n") + "\n\n" for rule in rules]
        rng.shuffle(rules)
        files.append((f"gate/rules/{path.name}", head + "".join(rules)))
    rng.shuffle(files)
    return files


def _load(files: list[tuple[str, str]]) -> RuleSet:
    return parse_rule_files(
        files, source=SHIPPED.source, read=lambda name: (FOLDER / name).read_text(encoding="utf-8")
    )


def _file_order(files: list[tuple[str, str]]) -> list[str]:
    return [m.group(1) for _, text in files for m in re.finditer(r'^id = "([^"]+)"', text, re.MULTILINE)]


@pytest.mark.parametrize("seed", range(5))
def test_neither_file_order_nor_rule_order_changes_the_rules_tried(seed: int) -> None:
    files = shuffled_files(seed)
    original = [
        (f"gate/rules/{p.name}", p.read_text(encoding="utf-8")) for p in sorted(FOLDER.glob("*.toml"))
    ]
    assert _file_order(files) != _file_order(original)  # the shuffle moved rules and files
    assert sorted(_file_order(files)) == sorted(_file_order(original))  # and lost none
    assert _load(files) == SHIPPED


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_shuffled_rules_decide_every_labelled_line_the_same(gate: Gate, seed: int) -> None:
    # Every labelled line (tests/gate, eval/data/gate-*, the dev probes): blocked or not, category,
    # rule id, kind and reading, with the rules loaded from shuffled files.
    shuffled = Gate(_load(shuffled_files(seed)), lexical=gate.lexical, timeout_ms=DECIDE_MS)
    lines = list(labelled_lines())
    assert len(lines) > 20_000
    for where, text in lines:
        assert shuffled.check(text) == gate.check(text), where


REPLIES = """
[replies.weapons]
en = "No weapons."
fr = "Pas d'armes."

[replies.self_harm]
en = "Helplines."
fr = "Numeros d'aide."
"""


def _rule(rule_id: str, category: str, pattern: str, *, strict: bool = False) -> str:
    return f'\n[[rules]]\nid = "{rule_id}"\ncategory = "{category}"\npatterns = [\'{pattern}\']\n' + (
        "strict = true\n" if strict else ""
    )


def test_strict_rules_then_precedence_then_ids_decide() -> None:
    rules = [
        _rule("weapons.b-gun", "weapons", r"\bgun\b"),
        _rule("weapons.a-gun", "weapons", r"\bgun\b"),
        _rule("self_harm.gun", "self_harm", r"\bgun\b"),
        _rule("weapons.strict-bomb", "weapons", r"\bbomb\b", strict=True),
        _rule("self_harm.bomb", "self_harm", r"\bbomb\b"),
    ]
    head = 'version = 1\nprecedence = ["self_harm", "weapons"]\n' + REPLIES
    for order in (rules, rules[::-1]):
        gate = Gate(parse_rules(head + "".join(order), source="t"))
        assert gate.check("a gun").rule_id == "self_harm.gun"  # the category first in precedence
        assert gate.check("a bomb").rule_id == "weapons.strict-bomb"  # strict rules before any other
    ruleset = parse_rules(
        'version = 1\nprecedence = ["weapons", "self_harm"]\n' + REPLIES + "".join(rules), source="t"
    )
    assert [r.id for r in ruleset.rules] == [
        "weapons.strict-bomb",
        "weapons.a-gun",  # the same category: by id, whatever the file order
        "weapons.b-gun",
        "self_harm.bomb",
        "self_harm.gun",
    ]
    assert ruleset.precedence == ("weapons", "self_harm")
    assert decision_order(ruleset.rules[0], ruleset.precedence) < decision_order(
        ruleset.rules[1], ("weapons",)
    )


def test_without_precedence_categories_rank_by_name() -> None:
    ruleset = parse_rules(
        "version = 1\n"
        + REPLIES
        + _rule("weapons.gun", "weapons", "gun")
        + _rule("self_harm.gun", "self_harm", "gun"),
        source="t",
    )
    assert ruleset.precedence == ("self_harm", "weapons")
    assert [r.id for r in ruleset.rules] == ["self_harm.gun", "weapons.gun"]


@pytest.mark.parametrize(
    ("precedence", "reason"),
    [
        ('["weapons"]', "missing ['self_harm']"),
        ('["weapons", "self_harm", "weapons"]', "lists a category twice"),
        ('["weapons", "self_harm", "drugs"]', "must list categories that have a reply"),
        ('"weapons"', "must list categories that have a reply"),
    ],
)
def test_a_broken_precedence_fails_at_load(precedence: str, reason: str) -> None:
    text = f"version = 1\nprecedence = {precedence}\n" + REPLIES + _rule("weapons.gun", "weapons", "gun")
    text += _rule("self_harm.gun", "self_harm", "gun")
    with pytest.raises(RulesError, match=re.escape(reason)):
        parse_rules(text, source="t")


@pytest.mark.parametrize(
    ("examples", "reason"),
    [
        ("examples.block = 'a gun'", "'examples.block' must be a list of non-empty strings"),
        ("examples.pass = ['']", "'examples.pass' must be a list of non-empty strings"),
        ("examples.maybe = ['a gun']", "'examples' takes only 'block' and 'pass'"),
    ],
)
def test_broken_examples_fail_at_load(examples: str, reason: str) -> None:
    text = "version = 1\n" + REPLIES + _rule("weapons.gun", "weapons", "gun") + examples + "\n"
    with pytest.raises(RulesError, match=re.escape(reason)):
        parse_rules(text, source="t")


def test_a_folder_is_read_as_one_document(tmp_path: Path) -> None:
    (tmp_path / "common.toml").write_text('version = 1\nprecedence = ["self_harm", "weapons"]\n')
    (tmp_path / "weapons.toml").write_text(
        REPLIES.split("[replies.self_harm]")[0] + _rule("weapons.gun", "weapons", "gun")
    )
    (tmp_path / "self_harm.toml").write_text("[replies.self_harm]" + REPLIES.split("[replies.self_harm]")[1])
    ruleset = load_rules(tmp_path)
    assert [(r.id, Path(r.source).name) for r in ruleset.rules] == [("weapons.gun", "weapons.toml")]
    assert set(ruleset.replies) == {"weapons", "self_harm"}
    # an error in a rule names the rule's own file
    (tmp_path / "self_harm.toml").write_text(
        "[replies.self_harm]" + REPLIES.split("[replies.self_harm]")[1] + _rule("self_harm.x", "drugs", "x")
    )
    with pytest.raises(RulesError, match=r"self_harm\.toml: rule 'self_harm\.x'"):
        load_rules(tmp_path)


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        ("version = 1\n", "'version' is also set in a.toml"),
        ('[replies.weapons]\nen = "x"\nfr = "y"\n', "[replies.weapons] is also set in a.toml"),
        ("[terms]\nx = 'y'\n", "'terms' is also set in a.toml"),
    ],
)
def test_a_key_set_by_two_files_fails_at_load(second: str, reason: str) -> None:
    first = "version = 1\n[terms]\nz = 'z'\n" + REPLIES + _rule("weapons.gun", "weapons", "gun")
    with pytest.raises(RulesError, match=re.escape(reason)):
        parse_rule_files([("a.toml", first), ("b.toml", second)], source="t")
