"""Word beginnings that every match of a pattern holds: triggers derived from the patterns.

A rule written without ``triggers`` would be searched over every whole question. For such a rule
the loader derives trigger groups from its patterns (``gate.rules.derived_triggers``): for each
pattern, and for each part of a ``near`` group, sets of literal word beginnings (at most
``PREFIX_HEAD`` letters) such that every match holds a word starting with one of each set
(:func:`word_needs`): the beginning of the word where a match starts, of a word after a separator,
of a required group. ``\\b(?:lethal|fatal)`` gives ``{"letha", "fatal"}``; ``\\ba?bomb`` gives
``{"abomb", "bomb"}``.

The analysis is conservative: whenever the parser cannot tell what comes next (a character class
too wide to list, ``\\w``, a repeat), the beginnings found so far are kept as they are, which is
always true of the match, only less selective. A piece that can begin without a literal word
character, or without a word boundary before it, gives no set; a pattern with no set leaves its
rule without triggers, searched in every question. ``tests/gate/test_cases.py::
test_triggers_never_change_a_decision`` checks the promise on every labelled case and forum question.

The patterns are parsed with the standard library's regular-expression parser; a pattern it cannot
read (the ``regex`` module's ``\\p{..}``) gives no set.
"""

from __future__ import annotations

import functools
import re
from re import _constants as c  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

from gate.derived import remembered

_MAX_BEGINNINGS = 96
"""More alternative beginnings than this and the set is cut where it stands (still true, less exact)."""
_MAX_CLASS = 12
"""A character class with more letters than this ends the literal beginning."""
_ZERO_WIDTH = frozenset({c.ASSERT, c.ASSERT_NOT})
_REPEATS = frozenset({c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)})

# One partial beginning: the letters read so far, and whether a word boundary precedes them.
_State = tuple[str, bool]


class _Unknown(Exception):
    """The pattern can begin a match in a way no literal beginning describes."""


def word_needs(pattern: str, limit: int) -> list[frozenset[str]]:
    """Sets of word beginnings (at most ``limit`` letters) such that every match of ``pattern``
    contains a word starting with one of the set: one set per required piece of the pattern that
    could be read (its beginning, a word after a separator, a required group), most selective first.
    Empty when none could be derived."""
    return list(_word_needs(pattern, limit))


# A reading is a pure function of the pattern's text, and loading the shipped rules asks for one per
# pattern and per part of a ``near`` group: each is computed once per process (every gate a process
# builds shares it), or read from ``gate/derived.json`` where it holds the pattern (``gate.derived``).
@functools.lru_cache(maxsize=8192)
def _word_needs(pattern: str, limit: int) -> tuple[frozenset[str], ...]:
    def compute() -> tuple[frozenset[str], ...]:
        try:
            parsed = _parser.parse(pattern, 0)
        except (re.error, OverflowError, RecursionError):
            return ()
        return tuple(_sequence(list(parsed), limit, anchored=False))

    return remembered(  # type: ignore[no-any-return]
        f"needs{limit}", pattern, compute, _encode_sets, lambda v: tuple(frozenset(s) for s in v)
    )


@functools.lru_cache(maxsize=8192)
def word_beginnings(pattern: str, limit: int) -> frozenset[str] | None:
    """The literal beginnings (at most ``limit`` letters, each at a word start) of every match of
    ``pattern``, or ``None`` when they cannot be derived."""

    def compute() -> frozenset[str] | None:
        try:
            parsed = _parser.parse(pattern, 0)
        except (re.error, OverflowError, RecursionError):
            return None
        return _run(list(parsed), limit, anchored=False)

    return remembered(  # type: ignore[no-any-return]
        f"beginnings{limit}", pattern, compute, _encode_set, lambda v: None if v is None else frozenset(v)
    )


def _encode_set(value: frozenset[str] | None) -> list[str] | None:
    return None if value is None else sorted(value)


def _encode_sets(value: tuple[frozenset[str], ...]) -> list[list[str]]:
    return [sorted(s) for s in value]


def cost(beginnings: frozenset[str]) -> float:
    """How often a set of beginnings is expected to meet a word of ordinary text: short beginnings
    ("a", "en") start many words, five letters few; the beginnings of the most common words of the
    forum's questions and of French function words count like two letters."""
    return sum(
        _COMMON_COST if b in COMMON_BEGINNINGS and len(b) > 2 else _COST.get(len(b), 1.0) for b in beginnings
    )


_COST = {1: 200.0, 2: 40.0, 3: 6.0, 4: 1.5}
_COMMON_COST = 40.0
COMMON_BEGINNINGS = frozenset(
    """
    about after alrea also and andro anima any anyon apres are ausi autre aux avant avec avoir
    basic becau ben bien blend build but cache camer can cet cete chang check clas cmake code
    colis color com come comen compi compo const conte corec could creat curen dans data debug
    defin deja des difer direc docum does doesn doing don donc each edito ele encor engin eror
    est etre even event every examp faire fait faut file files find fine first float folow for
    found from funct game gener get getre githu graph handl has have helo help here how howev
    ils image imple inclu insta inter into its just know les leur light like load lok mais make
    mater meme mes misin model moins mon more multi name ned new node norma not nous now objec
    one only other out par pas peut physi plus point posib posit pour probl progr proje quand
    que quel quele quest qui quoi realy rende resou resul retur right run same sampl sans scene
    scren scrip sems ses set setin shade share shoul simpl some somet son sourc speci start
    stati stil strin suis supor sur sure syste tes textu than thank that the them then there
    these they thing think this thoug time ton tous tout tres tried true try tryin two under une
    updat urho urhoe use used using value varia vecto versi very veut veux void vous want was
    way wel what when where which while why wil windo with witho work worki works world would
    wrong xml you
    """.split()  # noqa: SIM905 (a list of 250 words reads better as text)
)
"""Beginnings (three to five letters, normalised) of the words found in at least 60 of the 1,000
forum questions of ``python -m eval.bench gate``, and of French function words: a trigger made of
them would let a rule be tried on most questions."""


def _run(items: list[Any], limit: int, *, anchored: bool) -> frozenset[str] | None:
    """The beginnings of the word a match of ``items`` starts with (``anchored``: a word start is
    known to precede ``items``), or None."""
    try:
        open_, done = _walk(items, {("", anchored)}, limit)
    except _Unknown:
        return None
    done |= open_
    if not done or any(not letters or not anchored_ for letters, anchored_ in done):
        return None
    return frozenset(letters for letters, _ in done)


def _sequence(items: list[Any], limit: int, *, anchored: bool) -> list[frozenset[str]]:
    found: set[frozenset[str]] = set()
    for index, (op, av) in enumerate(items):
        if op not in _ZERO_WIDTH and op is not c.AT:
            run = _run(items[index:], limit, anchored=anchored)
            if run is not None:
                found.add(run)
        if op is c.SUBPATTERN:
            found.update(_sequence(list(av[-1]), limit, anchored=anchored))
        elif op in _REPEATS and av[0] >= 1:
            found.update(_sequence(list(av[2]), limit, anchored=anchored))
        elif op is c.BRANCH:
            best = [_sequence(list(alternative), limit, anchored=anchored) for alternative in av[1]]
            if all(best):
                found.add(frozenset().union(*(b[0] for b in best)))
        if op is c.AT:
            anchored = av in _WORD_START or (anchored and av not in _NOT_WORD_START)
        elif op in _REPEATS and av[0] == 0:
            # Skipped, the word start before it still holds; repeated, it must end with a separator.
            body = list(av[2])
            anchored = anchored and bool(body) and _ends_with_separator(*body[-1])
        elif op not in _ZERO_WIDTH:
            anchored = _ends_with_separator(op, av)
    return sorted(found, key=lambda b: (cost(b), sorted(b)))


_WORD_START = (c.AT_BOUNDARY, c.AT_BEGINNING, c.AT_BEGINNING_STRING)
_NOT_WORD_START = (c.AT_NON_BOUNDARY,)


def _ends_with_separator(op: Any, av: Any) -> bool:
    """Whether whatever ``(op, av)`` matches ends with a non-word character (a word may start next)."""
    if op is c.LITERAL:
        return not _is_word(chr(av))
    if op is c.IN:
        negated = bool(av) and av[0][0] is c.NEGATE
        if negated:
            return any(o is c.CATEGORY and a is c.CATEGORY_WORD for o, a in av[1:])
        letters = _class_letters(av)
        return letters is not None and not any(_is_word(letter) for letter in letters)
    if op in _REPEATS:
        body = list(av[2])
        return av[0] >= 1 and bool(body) and _ends_with_separator(*body[-1])
    if op is c.SUBPATTERN:
        body = list(av[-1])
        return bool(body) and _ends_with_separator(*body[-1])
    if op is c.BRANCH:
        return all(bool(alt) and _ends_with_separator(*list(alt)[-1]) for alt in av[1])
    return False


def _is_word(letter: str) -> bool:
    return letter.isalnum() or letter == "_"


def _walk(items: list[Any], states: set[_State], limit: int) -> tuple[set[_State], set[_State]]:
    """Read ``items`` from ``states``: returns (still open, finished) beginnings."""
    done: set[_State] = set()
    for op, av in items:
        if not states:
            break
        if op is c.LITERAL:
            states, done = _extend(states, done, [chr(av)], limit)
        elif op is c.IN:
            states, done = _extend(states, done, _class_letters(av), limit)
        elif op is c.AT:
            if av in (c.AT_BOUNDARY, c.AT_BEGINNING, c.AT_BEGINNING_STRING):
                states = {(letters, anchored or not letters) for letters, anchored in states}
        elif op in _ZERO_WIDTH:
            continue
        elif op is c.SUBPATTERN:
            states, finished = _walk(list(av[-1]), states, limit)
            done |= finished
        elif op is c.BRANCH:
            merged: set[_State] = set()
            for alternative in av[1]:
                open_, finished = _walk(list(alternative), set(states), limit)
                merged |= open_
                done |= finished
            states = merged
        elif op in _REPEATS:
            low, high, body = av
            once, finished = _walk(list(body), set(states), limit)
            done |= finished
            if high != 1:
                # More iterations may follow: what they add is unknown, so end these beginnings here.
                done |= once
                once = set()
            states = (states | once) if low == 0 else once
        else:
            # \w, ., a negated class, a back reference...: the beginning ends here.
            done |= states
            states = set()
        if len(states) + len(done) > _MAX_BEGINNINGS:
            done |= states
            states = set()
    return states, done


def _extend(
    states: set[_State], done: set[_State], letters: list[str] | None, limit: int
) -> tuple[set[_State], set[_State]]:
    """Append one character (one of ``letters``; ``None``: unknown) to every open beginning."""
    if letters is None:
        return set(), done | states
    extended: set[_State] = set()
    for text, anchored in states:
        for letter in letters:
            if not _is_word(letter):
                done.add((text, anchored))  # a non-word character ends the word's beginning
                continue
            if not text and not anchored:
                raise _Unknown  # a match may start inside a word: its beginning is unknown
            grown = (text + letter, anchored)
            (done if len(grown[0]) >= limit else extended).add(grown)
    return extended, done


def _class_letters(items: list[Any]) -> list[str] | None:
    """The characters of a small character class, or ``None`` for a wide or negated one."""
    letters: list[str] = []
    for op, av in items:
        if op is c.LITERAL:
            letters.append(chr(av))
        elif op is c.RANGE and av[1] - av[0] < _MAX_CLASS:
            letters.extend(chr(code) for code in range(av[0], av[1] + 1))
        else:
            return None
        if len(letters) > _MAX_CLASS:
            return None
    return letters
