"""Rules as data: load the rules (a folder of TOML files, or one file), validate every rule, compile
its patterns once.

The shipped rules are the folder ``gate/rules/``: one file per category (its reply and its rules),
``common.toml`` (version, precedence, terms, word lists), ``frames.toml`` and ``lexicons.toml``. The
folder is read as one document (:func:`parse_rule_files`); one file may also hold everything
(:func:`parse_rules`). Format (``docs/gate.md`` has the full description)::

    version = 1
    precedence = ["weapons"]                  # which category answers when two categories hit

    [terms]                                   # named regex fragments, used as {{name}}
    make = '(?:make|build|fabriquer)'

    [words]                                   # named word lists for triggers, used as "@name"
    make = ["make", "build*", "fabriqu*"]

    [[rules]]
    id = "weapons.bomb-outside-game"          # unique; letters, digits, '.', '_', '-'
    category = "weapons"                      # must have a reply below
    language = "any"                          # "en", "fr" or "any": the patterns' language
    description = "making an explosive device"
    triggers = [["@make"], ["bomb*", "explosive", "explosives"]]   # optional speed-up, see below
    patterns = ['{{make}}[^.!?]{0,30}bomb']   # any one matching is a hit ...
    exceptions = ['\\bin my game\\b']         # ... unless one of these matches too
    examples.block = ["how do I make a pipe bomb"]   # what the rule decides (checked by the tests)
    examples.pass = ["a bomb item in my game"]        # look-alikes it lets through

    [replies.weapons]
    en = "..."
    fr = "..."

Patterns are matched against :func:`gate.normalize.normalize` output, so they are written in lower
case; accents are folded and doubled letters squeezed in the patterns too (``fold_pattern``).
A pattern must not cross a sentence end (``.``, ``!``, ``?``): the gate searches sentence by sentence.

``triggers`` make the gate fast. A flat list is one group; every match of a pattern must contain a
word of each group: one of its words (``"bomb"``) or a word starting with one of its prefixes
(``"bomb*"``; the first five letters count). The gate tries a rule only when every group has a word
in the question, and only in the sentences that hold a word of every group. This is a promise
of the rule's author, checked by the tests on every labelled case. A rule without triggers is
always tried, on the whole text.

**Decision order.** The rules are tried strict rules first, then by their category's place in
``precedence``, then by id (:func:`decision_order`): the first rule that hits decides, and neither
the order of the files nor the order of the rules inside a file changes a decision. ``precedence``
lists every category that has rules (the shipped list, and why, is in ``common.toml``); without
it (a file of one's own) categories rank by name.
Anything wrong raises :class:`gate.errors.RulesError` naming the file, the rule and the reason.
"""

from __future__ import annotations

import functools
import itertools
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import regex

from gate import derived
from gate.errors import RulesError
from gate.literals import cost, word_beginnings, word_needs
from gate.normalize import fold_pattern

SUPPORTED_VERSION = 1
LANGUAGES = frozenset({"en", "fr", "any"})
_RULE_KEYS = frozenset(
    {
        "id",
        "category",
        "language",
        "description",
        "triggers",
        "patterns",
        "near",
        "near_words",
        "exceptions",
        "exception_window",
        "strict",
        "examples",
    }
)
_TOP_KEYS = frozenset(
    {
        "version",
        "terms",
        "words",
        "replies",
        "rules",
        "strict_categories",
        "lexicons",
        "frames",
        "real_world",
        "precedence",
    }
)
_MERGED_TABLES = ("replies",)
"""Tables that several files of a rules folder may each add entries to (one category's reply each)."""
_APPENDED = ("rules", "frames")
"""Arrays of tables that the files of a rules folder add to."""
_EXAMPLE_KEYS = frozenset({"block", "pass"})
_FRAME_KEYS = frozenset({"id", "description", "categories", "patterns", "unless", "scope"})
FRAME_TURN_CHARS = 200
"""How far after a frame's match its ``unless`` patterns are looked for (across sentence ends)."""
FRAME_SCOPES = ("clause", "after", "quoted")
"""Where a frame is looked for: the clause of the match, the text after it, or the words that
introduce the quotation holding it (``Frame.scope``)."""
QUOTE_LEAD_CHARS = 80
"""How far before a quotation's opening mark a ``quoted`` frame's lead-in is looked for."""
DEFAULT_EXCEPTION_WINDOW = 60
"""Characters either side of a pattern match (inside its clause) where an exception may excuse it."""
DEFAULT_NEAR_WORDS = 8
"""Words allowed between the parts of a ``near`` group (in any order, inside one sentence)."""
_LEXICON_LANGUAGES = ("en", "fr", "any")
_LEXICON_WORDS = regex.compile(r"[ \-]+")
_LEXICON_HEAD = regex.compile(r"[ \-']+")
_LEXICON_ENTRY = regex.compile(r"[a-z0-9][a-z0-9' \-]*\*?")
PREFIX_HEAD = 5
_ASCII_WORD = regex.compile(r"[a-z0-9_]+")
"""Only the first five letters of a prefix trigger count: the gate compares them with word beginnings."""
_REPLY_LANGUAGES = ("en", "fr")
_ID = regex.compile(r"[a-z0-9][a-z0-9._\-]*")
_TRIGGER = regex.compile(r"(?P<word>\w+)(?P<star>\*?)")
_PLACEHOLDER = regex.compile(r"\{\{(\w+)\}\}")
# An upper-case letter that is not part of an escape (\B, \W, \p{Lu}, \N{...}) or a group name.
_UPPER = regex.compile(r"\\[pPN]\{[^}]*\}|\\.|\(\?P?<[^>]*>|(?P<upper>[A-Z])")


@dataclass(frozen=True, slots=True)
class TriggerGroup:
    """Words (exact) and prefixes (at most ``PREFIX_HEAD`` letters); one of them must be present."""

    words: frozenset[str]
    prefixes: frozenset[str]


@dataclass(frozen=True, slots=True)
class Frame:
    """A benign frame shared by the rules of some categories (``[[frames]]``): it excuses a match of
    every non-strict rule of those categories, scoped like the rule's own exceptions (the clause of
    the match, within its ``exception_window``). A frame followed in the question (within
    ``FRAME_TURN_CHARS``, across sentence ends) by its ``turn``, the asker turning to a request of
    their own ("... so I can", "help me write"), excuses nothing.

    ``scope`` is where the frame is looked for: ``"clause"`` (the default), the clause of the match as
    above; ``"after"``, the text that follows the match, within ``FRAME_TURN_CHARS`` and across
    sentence ends: for a retraction that comes after what it retracts ("I want to die. Okay, not
    literally."). The turn is then looked for after the frame's own match, as for a clause frame.
    ``"quoted"``: the match lies inside a quotation (between “ ”, « » or straight double quotes,
    no closing mark between its start and end), and the frame matches in the ``QUOTE_LEAD_CHARS``
    before the opening mark, the words that introduce someone else's words ("someone replied:",
    "un membre a écrit", "messages like"). The turn is looked for in that lead-in and after the
    closing mark: "write me a message that says “…”" is a request, not a report."""

    id: str
    categories: frozenset[str]
    pattern: LazyPattern
    turn: LazyPattern | None = None
    scope: str = "clause"


@dataclass(frozen=True, slots=True)
class Rule:
    """One validated rule: a hit when ``pattern`` matches and ``exception`` (if any) does not match
    in the clause of that match, within ``exception_window`` characters of it.

    ``strict`` rules (categories with no benign reading) have no exceptions at all.
    ``triggers`` (folded like the text): when not empty, the rule is tried only on questions that
    satisfy every group (a speed-up; see the module docstring).
    ``parts``: the alternatives ``pattern`` joins (its patterns, then the orders of its ``near``
    groups), which the gate may try one by one (:func:`match_starts`).
    """

    id: str
    category: str
    language: str
    description: str
    pattern: LazyPattern
    exception: LazyPattern | None
    triggers: tuple[TriggerGroup, ...] = ()
    strict: bool = False
    exception_window: int = DEFAULT_EXCEPTION_WINDOW
    parts: tuple[str, ...] = ()
    frames: tuple[Frame, ...] = ()
    examples_block: tuple[str, ...] = ()
    """``examples.block``: questions this rule decides (the gate blocks them under this id)."""
    examples_pass: tuple[str, ...] = ()
    """``examples.pass``: look-alikes near it that the gate lets through."""
    source: str = ""
    """The file the rule was read from (named in errors and by the tests)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A category's canned reply in both languages."""

    en: str
    fr: str

    def text(self, language: str) -> str:
        return self.fr if language == "fr" else self.en


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules in decision order (:func:`decision_order`; the first rule that hits decides), and
    the replies."""

    source: str
    rules: tuple[Rule, ...]
    replies: Mapping[str, Reply]
    real_world: LazyPattern | None = None
    """``real_world``: the asker saying the request is for real, not for the game or the story ("for
    me, not the ragdoll", "en vrai, pas la hitbox du jeu"). A clause holding it takes no exception
    and no frame: the game or fiction words around it no longer excuse the match."""
    precedence: tuple[str, ...] = ()
    """The categories in the order they answer when rules of several categories hit a question."""


SHIPPED = "rules"
"""The shipped rules: the folder ``gate/rules/``."""


def load_rules(path: Path | str | None = None) -> RuleSet:
    """Load and validate the rules at ``path``: a folder (every ``*.toml`` in it, read as one
    document by :func:`parse_rule_files`) or one file (:func:`parse_rules`); ``None`` means the
    shipped folder ``gate/rules/``.

    A ``lexicons = "FILE"`` key names a lexicon file in the same folder.
    """
    if path is None:
        folder = resources.files("gate").joinpath(SHIPPED)
        names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".toml"))
        return parse_rule_files(
            [(f"gate/rules/{name}", folder.joinpath(name).read_text(encoding="utf-8")) for name in names],
            source="gate/rules/ (shipped)",
            read=lambda name: folder.joinpath(name).read_text(encoding="utf-8"),
        )
    source = str(path)
    target = Path(path)
    try:
        if target.is_dir():
            files = [(str(file), file.read_text(encoding="utf-8")) for file in sorted(target.glob("*.toml"))]
            return parse_rule_files(
                files, source=source, read=lambda name: (target / name).read_text(encoding="utf-8")
            )
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(source, f"cannot read the file: {exc}") from None
    folder = target.parent
    return parse_rules(text, source=source, read=lambda name: (folder / name).read_text(encoding="utf-8"))


def parse_rules(text: str, *, source: str, read: Callable[[str], str] | None = None) -> RuleSet:
    """Validate and compile the rules in ``text``; ``source`` names it in errors.

    ``read(name)`` returns the text of a file the rules refer to (``lexicons = "lexicons.toml"``);
    without it such a reference is an error.
    """
    return _ruleset(_load_toml(text, source), source, read, {})


def parse_rule_files(
    files: Sequence[tuple[str, str]], *, source: str, read: Callable[[str], str] | None = None
) -> RuleSet:
    """Validate and compile the rules of several files (``(name, text)`` each), read as one document.

    Each file is TOML in the rule language. The files' ``[[rules]]`` and ``[[frames]]`` are put
    together and their ``[replies.<category>]`` tables too (a category's reply in one file only);
    every other key (``version``, ``precedence``, ``[terms]``, ``[words]``, ...) is set by one file
    only. A file that another names as its ``lexicons`` is that lexicon file, not rules. The order of
    the files changes nothing: not the rules, and not a decision (:func:`decision_order`).
    """
    documents = [(name, _load_toml(text, name)) for name, text in files]
    lexicon_files = {data["lexicons"] for _, data in documents if isinstance(data.get("lexicons"), str)}
    merged: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    origins: dict[int, str] = {}
    for name, data in documents:
        if Path(name).name in lexicon_files:
            continue
        for key, value in data.items():
            if key in _APPENDED:
                if not isinstance(value, list):
                    raise RulesError(name, f"'{key}' must be a list of [[{key}]] tables")
                if key == "rules":
                    start = len(merged.get("rules", []))
                    origins.update({start + i: name for i in range(len(value))})
                merged.setdefault(key, []).extend(value)
            elif key in _MERGED_TABLES and isinstance(value, dict):
                table = merged.setdefault(key, {})
                for entry, content in value.items():
                    if entry in table:
                        raise RulesError(name, f"[{key}.{entry}] is also set in {set_by[f'{key}.{entry}']}")
                    table[entry] = content
                    set_by[f"{key}.{entry}"] = name
            elif key in merged:
                raise RulesError(name, f"'{key}' is also set in {set_by[key]}")
            else:
                merged[key] = value
                set_by[key] = name
    return _ruleset(merged, source, read, origins)


def _load_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(source, f"not valid TOML: {exc}") from None


def decision_order(rule: Rule, precedence: Sequence[str]) -> tuple[bool, int, str, str]:
    """Where ``rule`` is tried: strict rules first (no benign reading: no frame, veto or second
    opinion can drop their hit, so they answer whatever else matches), then by the category's place
    in ``precedence`` (absent: after every listed one, by name), then by id."""
    rank = precedence.index(rule.category) if rule.category in precedence else len(precedence)
    return (not rule.strict, rank, rule.category, rule.id)


def _ruleset(
    data: dict[str, Any], source: str, read: Callable[[str], str] | None, origins: Mapping[int, str]
) -> RuleSet:
    """The rule set of one document (``origins``: the file of each rule, by index, for errors)."""
    if data.get("version") != SUPPORTED_VERSION:
        raise RulesError(source, f"'version' must be {SUPPORTED_VERSION}, got {data.get('version')!r}")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise RulesError(source, f"unknown top-level keys {sorted(unknown)}")
    lexicon_terms: dict[str, str] = {}
    words = _word_lists(data.get("words", {}), source)
    if "lexicons" in data:
        _lexicons(data["lexicons"], read, lexicon_terms, words, source)
    terms = _terms(data.get("terms", {}), source, lexicon_terms)
    replies = _replies(data.get("replies"), source)
    strict_categories = data.get("strict_categories", [])
    if not isinstance(strict_categories, list) or not all(
        isinstance(c, str) and c in replies for c in strict_categories
    ):
        raise RulesError(source, "'strict_categories' must list categories that have a reply")
    frames = _frames(data.get("frames", []), terms, replies, source)
    real_world = _pattern_list(data.get("real_world", []), "real_world", terms, source, "real_world")
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise RulesError(source, "no [[rules]] defined")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rules):
        where = origins.get(index, source)
        rule = _rule(raw, index, terms, words, replies, where, frames)
        if rule.category in strict_categories and not rule.strict:
            raise RulesError(
                where, f"category {rule.category!r} is strict: its rules need 'strict = true'", rule.id
            )
        if rule.id in seen:
            raise RulesError(where, "duplicate rule id", rule.id)
        seen.add(rule.id)
        rules.append(rule)
    precedence = _precedence(data.get("precedence"), {r.category for r in rules}, replies, source)
    return RuleSet(
        source=source,
        rules=tuple(sorted(rules, key=lambda r: decision_order(r, precedence))),
        replies=replies,
        real_world=_join(real_world, source, "real_world", "real_world") if real_world else None,
        precedence=precedence,
    )


def _precedence(
    raw: object, categories: set[str], replies: Mapping[str, Reply], source: str
) -> tuple[str, ...]:
    """``precedence``: every category that has rules, each once; absent, the categories by name."""
    if raw is None:
        return tuple(sorted(categories))
    if not isinstance(raw, list) or not all(isinstance(c, str) and c in replies for c in raw):
        raise RulesError(source, "'precedence' must list categories that have a reply")
    if len(set(raw)) != len(raw):
        raise RulesError(source, "'precedence' lists a category twice")
    missing = categories - set(raw)
    if missing:
        raise RulesError(
            source, f"'precedence' must list every category that has rules; missing {sorted(missing)}"
        )
    return tuple(raw)


def _frames(raw: object, terms: dict[str, str], replies: dict[str, Reply], source: str) -> list[Frame]:
    if not isinstance(raw, list):
        raise RulesError(source, "'frames' must be a list of [[frames]] tables")
    frames: list[Frame] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise RulesError(source, f"frames[{index}] is not a table")
        frame_id = entry.get("id")
        if not isinstance(frame_id, str) or not _ID.fullmatch(frame_id):
            raise RulesError(source, f"frames[{index}]: 'id' must match {_ID.pattern}, got {frame_id!r}")
        where = f"frame {frame_id}"
        unknown = set(entry) - _FRAME_KEYS
        if unknown:
            raise RulesError(source, f"{where}: unknown keys {sorted(unknown)}")
        if any(f.id == frame_id for f in frames):
            raise RulesError(source, f"{where}: duplicate frame id")
        categories = entry.get("categories")
        if not isinstance(categories, list) or not categories or not all(c in replies for c in categories):
            raise RulesError(source, f"{where}: 'categories' must list categories that have a reply")
        if not isinstance(entry.get("description", ""), str):
            raise RulesError(source, f"{where}: description must be a string")
        patterns = _pattern_list(entry.get("patterns"), "patterns", terms, source, where)
        if not patterns:
            raise RulesError(source, f"{where}: a frame needs 'patterns'")
        unless = _pattern_list(entry.get("unless", []), "unless", terms, source, where)
        scope = entry.get("scope", "clause")
        if scope not in FRAME_SCOPES:
            raise RulesError(source, f"{where}: 'scope' must be one of {list(FRAME_SCOPES)}, got {scope!r}")
        frames.append(
            Frame(
                frame_id,
                frozenset(categories),
                _join(patterns, source, where, "patterns"),
                _join(unless, source, where, "unless") if unless else None,
                scope,
            )
        )
    return frames


def _terms(raw: object, source: str, lexicons: dict[str, str]) -> dict[str, str]:
    """The ``[terms]``, after the lexicons' terms (so a term can use ``{{lex_<name>}}``)."""
    if not isinstance(raw, dict):
        raise RulesError(source, "[terms] must be a table of strings")
    terms = dict(lexicons)
    for name, value in raw.items():
        if name in lexicons:
            raise RulesError(source, f"term {name!r} has the name of a lexicon")
        if not isinstance(value, str) or not value:
            raise RulesError(source, f"term {name!r} must be a non-empty string")
        expanded = _expand(value, terms, source, None, f"term {name!r}")
        _compile(expanded, source, None, f"term {name!r}")
        terms[name] = expanded
    return terms


def _replies(raw: object, source: str) -> dict[str, Reply]:
    if not isinstance(raw, dict) or not raw:
        raise RulesError(source, "no [replies.<category>] tables defined")
    replies: dict[str, Reply] = {}
    for category, entry in raw.items():
        if not isinstance(entry, dict) or set(entry) != set(_REPLY_LANGUAGES):
            raise RulesError(source, f"[replies.{category}] must have exactly the keys 'en' and 'fr'")
        texts = [entry[lang] for lang in _REPLY_LANGUAGES]
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise RulesError(source, f"[replies.{category}] texts must be non-empty strings")
        replies[category] = Reply(en=entry["en"], fr=entry["fr"])
    return replies


def _lexicons(
    name: object,
    read: Callable[[str], str] | None,
    terms: dict[str, str],
    words: dict[str, list[str]],
    source: str,
) -> None:
    """Slang lexicons (one file, a table per lexicon with ``en``/``fr``/``any`` lists of entries):
    each becomes the term ``{{lex_<name>}}`` and the word list ``@lex_<name>``.

    An entry is a word or a phrase in lower case (``"coke"``, ``"date rape drug"``); a final ``*``
    makes it a prefix (``"oxy*"``: oxy, oxys, oxycodone). Phrases match with any separators between
    their words (``date-rape drug``). The trigger words of a phrase are its first word.
    """
    if not isinstance(name, str) or not name or read is None:
        raise RulesError(source, "'lexicons' must name a file beside the rules file")
    where = f"{source}: lexicons {name!r}"
    try:
        data = tomllib.loads(read(name))
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(where, f"cannot read the file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(where, f"not valid TOML: {exc}") from None
    for lexicon, table in data.items():
        if not _ID.fullmatch(lexicon) or not isinstance(table, dict) or not table:
            raise RulesError(where, f"[{lexicon}] must be a table of entry lists")
        entries: list[str] = []
        for language, values in table.items():
            if language not in _LEXICON_LANGUAGES:
                raise RulesError(where, f"[{lexicon}]: unknown language {language!r}")
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise RulesError(where, f"[{lexicon}].{language} must be a list of strings")
            for value in values:
                folded = fold_pattern(value.strip())
                if not _LEXICON_ENTRY.fullmatch(folded):
                    raise RulesError(
                        where, f"[{lexicon}]: entry {value!r} is not a lower-case word or phrase"
                    )
                entries.append(folded)
        key = "lex_" + lexicon.replace("-", "_")
        if key in words:
            raise RulesError(where, f"lexicon {lexicon!r} clashes with a term or word list {key!r}")
        alternatives = []
        triggers = []
        for entry in sorted(set(entries), key=lambda e: (-len(e), e)):  # longest first; a fixed order
            prefix = entry.endswith("*")
            parts = [regex.escape(part) for part in _LEXICON_WORDS.split(entry.rstrip("*")) if part]
            alternatives.append(r"[^\w.!?]+".join(parts) + (r"\w*" if prefix else r"\b"))
            head = _LEXICON_HEAD.split(entry.rstrip("*"))[0]
            triggers.append(head + ("*" if prefix and len(parts) == 1 else ""))
        terms[key] = r"\b(?:" + "|".join(alternatives) + ")"
        _compile(terms[key], where, None, f"lexicon {lexicon!r}")
        words[key] = sorted(set(triggers))


def _word_lists(raw: object, source: str) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        raise RulesError(source, "[words] must be a table of lists of strings")
    for name, value in raw.items():
        if not isinstance(value, list) or not value or not all(isinstance(w, str) for w in value):
            raise RulesError(source, f"word list {name!r} must be a non-empty list of strings")
    return raw


def _rule(
    raw: object,
    index: int,
    terms: dict[str, str],
    words: dict[str, list[str]],
    replies: dict[str, Reply],
    source: str,
    frames: list[Frame],
) -> Rule:
    if not isinstance(raw, dict):
        raise RulesError(source, f"rules[{index}] is not a table")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not _ID.fullmatch(rule_id):
        raise RulesError(source, f"rules[{index}]: 'id' must match {_ID.pattern}, got {rule_id!r}")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise RulesError(source, f"unknown keys {sorted(unknown)}", rule_id)
    category = raw.get("category")
    if not isinstance(category, str) or category not in replies:
        raise RulesError(source, f"category {category!r} has no [replies.<category>] table", rule_id)
    language = raw.get("language", "any")
    if language not in LANGUAGES:
        raise RulesError(source, f"language must be one of {sorted(LANGUAGES)}, got {language!r}", rule_id)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise RulesError(source, "description must be a string", rule_id)
    triggers = _triggers(raw.get("triggers", []), words, source, rule_id)
    near_words = _count(raw, "near_words", DEFAULT_NEAR_WORDS, 0, 20, source, rule_id)
    plain = _pattern_list(raw.get("patterns", []), "patterns", terms, source, rule_id)
    groups = _near_groups(raw.get("near", []), terms, source, rule_id)
    patterns = plain + _near(groups, near_words)
    if not patterns:
        raise RulesError(source, "a rule needs 'patterns' or 'near'", rule_id)
    if not triggers:
        triggers = derived_triggers([[p] for p in plain] + groups)
    exceptions = _pattern_list(raw.get("exceptions", []), "exceptions", terms, source, rule_id)
    strict = raw.get("strict", False)
    if not isinstance(strict, bool):
        raise RulesError(source, "'strict' must be true or false", rule_id)
    if strict and exceptions:
        raise RulesError(source, "a strict rule (no benign reading) takes no exceptions", rule_id)
    window = _count(raw, "exception_window", DEFAULT_EXCEPTION_WINDOW, 10, 400, source, rule_id)
    block, passes = _examples(raw.get("examples", {}), source, rule_id)
    pattern = _join(patterns, source, rule_id, "patterns")
    return Rule(
        id=rule_id,
        category=category,
        language=str(language),
        description=description,
        pattern=pattern,
        exception=_join(exceptions, source, rule_id, "exceptions") if exceptions else None,
        triggers=triggers,
        strict=strict,
        exception_window=window,
        parts=tuple(patterns),
        frames=() if strict else tuple(f for f in frames if category in f.categories),
        examples_block=block,
        examples_pass=passes,
        source=source,
    )


def _examples(raw: object, source: str, rule_id: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``examples.block`` and ``examples.pass``: lists of questions (checked by the tests, not at load)."""
    if not isinstance(raw, dict) or set(raw) - _EXAMPLE_KEYS:
        raise RulesError(source, "'examples' takes only 'block' and 'pass', lists of questions", rule_id)
    found = []
    for key in ("block", "pass"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise RulesError(source, f"'examples.{key}' must be a list of non-empty strings", rule_id)
        found.append(tuple(value))
    return found[0], found[1]


def match_starts(pattern: str) -> frozenset[str] | None:
    """The literal beginnings (ASCII letters, digits, ``_``; at most ``PREFIX_HEAD``) of the word
    where every match of ``pattern`` starts (``gate.literals.word_beginnings``), or None when they
    cannot be derived. Trying ``pattern`` only at the starts of words that begin with one of them
    finds exactly the matches a scan of every position finds."""
    beginnings = word_beginnings(pattern, PREFIX_HEAD)
    if beginnings is None or not all(_ASCII_WORD.fullmatch(b) for b in beginnings):
        return None
    return beginnings


def _count(
    raw: dict[str, object], key: str, default: int, low: int, high: int, source: str, rule_id: str
) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RulesError(source, f"{key!r} must be an integer from {low} to {high}, got {value!r}", rule_id)
    return value


def _near_groups(raw: object, terms: dict[str, str], source: str, rule_id: str) -> list[list[str]]:
    """The ``near`` groups' parts, expanded and folded."""
    if not isinstance(raw, list) or not all(
        isinstance(g, list) and 2 <= len(g) <= 3 and all(isinstance(p, str) and p for p in g) for g in raw
    ):
        raise RulesError(source, "'near' must be a list of lists of two or three patterns", rule_id)
    return [_pattern_list(group, f"near[{index}]", terms, source, rule_id) for index, group in enumerate(raw)]


def _near(groups: list[list[str]], gap_words: int) -> list[str]:
    """``near`` groups: every part within ``gap_words`` words of the next, in any order, in one
    sentence. ``[["{{make}}", "{{explosive}}"]]`` is ``make…explosive`` or ``explosive…make``."""
    gap = rf"(?:[^\w.!?]+\w+){{0,{gap_words}}}?[^\w.!?]+"
    return [
        gap.join(f"(?:{p})" for p in order) for parts in groups for order in itertools.permutations(parts)
    ]


def derived_triggers(alternatives: list[list[str]]) -> tuple[TriggerGroup, ...]:
    """Trigger groups for a rule written without ``triggers``, derived from its patterns.

    ``alternatives`` holds, for each way the rule can match (a pattern, or a ``near`` group), the
    patterns that every such match contains (the pattern itself, or each part of the group). Each
    gives sets of word beginnings that every match contains (:func:`gate.literals.word_needs`),
    the most selective first; group ``k`` takes the ``k``-th set of every alternative, so every
    match of the rule holds a word of every group, and the first group (which picks the sentences)
    is the most selective. Empty when an alternative gives no set: the rule is then always tried.
    """
    choices: list[list[frozenset[str]]] = []
    for parts in alternatives:
        found = {needs for part in parts for needs in word_needs(part, PREFIX_HEAD)}
        if not found:
            return ()
        choices.append(sorted(found, key=lambda b: (cost(b), sorted(b))))
    groups: list[TriggerGroup] = []
    for k in range(min(_DERIVED_GROUPS, max(map(len, choices), default=0))):
        prefixes = frozenset().union(*(found[min(k, len(found) - 1)] for found in choices))
        group = TriggerGroup(frozenset(), prefixes)
        if group not in groups:
            groups.append(group)
    return tuple(groups)


_DERIVED_GROUPS = 3


def _triggers(
    raw: object, words: dict[str, list[str]], source: str, rule_id: str
) -> tuple[TriggerGroup, ...]:
    if not isinstance(raw, list):
        raise RulesError(source, "'triggers' must be a list of words or a list of lists of words", rule_id)
    if not raw:
        return ()
    groups = raw if all(isinstance(g, list) for g in raw) else [raw]
    result = []
    for group in groups:
        if not group or not all(isinstance(t, str) for t in group):
            raise RulesError(
                source, "'triggers' must be a list of words or a list of lists of words", rule_id
            )
        exact: set[str] = set()
        prefixes: set[str] = set()
        for trigger in _expand_words(group, words, source, rule_id):
            match = _TRIGGER.fullmatch(fold_pattern(trigger))
            if match is None or match.group() != match.group().lower():
                raise RulesError(
                    source, f"trigger {trigger!r}: one lower-case word, optionally ending with '*'", rule_id
                )
            if match.group("star"):
                prefixes.add(match.group("word")[:PREFIX_HEAD])
            else:
                exact.add(match.group("word"))
        result.append(TriggerGroup(frozenset(exact), frozenset(prefixes)))
    return tuple(result)


def _expand_words(group: list[str], words: dict[str, list[str]], source: str, rule_id: str) -> list[str]:
    expanded: list[str] = []
    for trigger in group:
        if trigger.startswith("@"):
            if trigger[1:] not in words:
                raise RulesError(source, f"unknown word list {trigger!r} (define it in [words])", rule_id)
            expanded.extend(words[trigger[1:]])
        else:
            expanded.append(trigger)
    return expanded


def _pattern_list(raw: object, key: str, terms: dict[str, str], source: str, rule_id: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise RulesError(source, f"{key!r} must be a list of non-empty strings", rule_id)
    folded = []
    for i, pattern in enumerate(raw):
        where = f"{key}[{i}]"
        expanded = fold_pattern(_expand(pattern, terms, source, rule_id, where))
        upper = next((m for m in _UPPER.finditer(expanded) if m.group("upper")), None)
        if upper is not None:
            raise RulesError(
                source, f"{where}: upper-case {upper.group()!r}; text is matched lower-case", rule_id
            )
        _compile(expanded, source, rule_id, where, nonempty=True)
        folded.append(expanded)
    return folded


def _expand(pattern: str, terms: dict[str, str], source: str, rule_id: str | None, where: str) -> str:
    def replace(match: regex.Match[str]) -> str:
        name = match.group(1)
        if name not in terms:
            raise RulesError(
                source, f"{where}: unknown term {{{{{name}}}}} (define it earlier in [terms])", rule_id
            )
        return terms[name]

    return _PLACEHOLDER.sub(replace, pattern)


def _compile(pattern: str, source: str, rule_id: str | None, where: str, *, nonempty: bool = False) -> None:
    """Raise RulesError unless ``pattern`` compiles (and, ``nonempty``, matches no empty text).

    A pattern ``gate/derived.json`` remembers passing the same check is not compiled again here: it
    is compiled when a question first needs it (:class:`LazyPattern`)."""
    check = "nonempty" if nonempty else "compiles"
    if derived.is_valid(pattern, check):
        return
    try:
        compiled = _regex(pattern)
    except regex.error as exc:
        raise RulesError(source, f"{where}: invalid regular expression: {exc}", rule_id) from None
    if nonempty and compiled.search("") is not None:
        raise RulesError(source, f"{where} matches the empty text, so it would match everything", rule_id)
    derived.passed(pattern, check)


class LazyPattern:
    """A validated pattern, compiled (once per process, shared) the first time it is searched.

    It answers ``match``, ``search``, ``finditer`` and ``fullmatch`` as ``regex.Pattern`` does: the
    first call compiles the pattern and keeps the compiled pattern's own bound methods in the slots,
    so later calls cost what they cost on the compiled pattern. ``pattern`` is the source."""

    __slots__ = ("finditer", "fullmatch", "match", "pattern", "search")

    _METHODS = ("finditer", "fullmatch", "match", "search")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __getattr__(self, name: str) -> Any:
        # Called only for a slot not yet set: compile, then fill every method slot.
        if name not in LazyPattern._METHODS:
            raise AttributeError(name)
        compiled = self.compiled()
        for method in LazyPattern._METHODS:
            object.__setattr__(self, method, getattr(compiled, method))
        return getattr(compiled, name)

    def compiled(self) -> regex.Pattern[str]:
        return _regex(self.pattern)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern[:60]!r}{'...' if len(self.pattern) > 60 else ''})"


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled once per process: the shipped rules compile about 1,150 patterns (about
    1.3 s), and every gate a process builds (each pipeline, each test) would compile them again.
    A compiled pattern is immutable, so gates share it. Errors are not cached: they raise each time."""
    return regex.compile(pattern)


def _join(patterns: list[str], source: str, rule_id: str, key: str) -> LazyPattern:
    """One alternation per rule: one scan of the text instead of one per pattern."""
    joined = "|".join(f"(?:{p})" for p in patterns)
    _compile(joined, source, rule_id, key)
    return LazyPattern(joined)
