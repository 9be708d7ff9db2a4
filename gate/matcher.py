"""The gate itself: normalise a question, try the rules in decision order, return a decision.

A rule is tried only when its trigger groups all have a word in the question, and its pattern is
searched only in the sentences that hold a word of its first group (see :mod:`gate.rules`), and
there only at the word starts where one of its matches can begin (``Rule.starts``). An exception is
*scoped*: it excuses one match of the pattern only when it matches in that match's clause (the
sentence, cut at clause breaks such as ";", "but", "btw", "for real", "en vrai"), within the rule's
``exception_window`` characters either side. The rule hits when one match is not excused; strict
rules have no exceptions. The first rule that hits decides, in the rule set's order (strict rules
first, then by category precedence, then by id: ``gate.rules.decision_order``). When no rule hits,
the lexical head (:mod:`gate.lexical_head`, when the gate has one) judges the words of each clause;
its hit is reported as rule ``lexical.<category>``. A hit of a rule with a benign reading (not
``strict``) is dropped when the head scores the question under its ``veto`` (it reads like the
look-alikes); ``check(text, benign_reading=False)`` tries only the strict rules (then the head), for
a caller whose own second opinion dropped such a hit (the embedding layer's ``rule_veto``,
``gate.intent``).

Bounded work, never an exception for any input string:

- the question is cut to ``max_chars`` characters before normalisation (a longer post is judged on
  its beginning, where a mention's question is);
- every regex call carries ``timeout``; a rule whose *pattern* times out counts as no hit for that
  rule (the other rules still run), and a rule whose *exception* times out counts as a hit (its
  pattern did match, and the exception could not clear it). Either way the rule id is logged at
  WARNING, without the text, and listed in ``GateDecision.timed_out`` for the trace.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import regex

from gate.language import language_of
from gate.lexical_head import LexicalDecision, LexicalHead
from gate.literals import first_words, word_needs
from gate.normalize import normalize
from gate.normalize import same_words as _same_words
from gate.readings import readings
from gate.rules import (
    FRAME_TURN_CHARS,
    PREFIX_HEAD,
    QUOTE_LEAD_CHARS,
    Frame,
    LazyPattern,
    Rule,
    RuleSet,
    TriggerGroup,
    load_rules,
)
from gate.support import SUPPORT, seeks_support

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 50
DEFAULT_MAX_CHARS = 4000
_WORDS = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?]")
# Where a clause ends inside a sentence: an exception on one side does not excuse a match on the other.
_CLAUSE_BREAK = re.compile(
    r"[;()]|\b(?:but|mais|however|anyway|anyways|btw|by the way|au fait|sinon|bref|d'aileurs|"
    r"off[- ]topic|hors[- ]sujet|unrelated|sans rapport|for real|irl|in real life|real life|"
    r"en vrai|pour de vrai|dans la vraie vie|vraie vie|en vrai de vrai|now|maintenant|also|ausi)\b"
)


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What the gate decided about one question.

    ``hit`` is True when a rule matched; then ``rule_id``, ``category`` and ``reply`` (the category's
    canned reply in ``language``) are set. ``language`` is always the detected one ("fr" or "en").
    ``lexical_score`` is the lexical head's logit when the head judged the question (no rule hit),
    else None: the embedding layer reads it (its lexical floor, ``gate.intent``); it is trace
    information, not part of the decision's identity (left out of ``==``). ``benign_reading`` is
    True when the hit is a rule that is not ``strict``: a second opinion may drop it.

    ``kind`` is ``"refusal"`` (a canned refusal on a hit; the default for a miss) or ``"support"``:
    someone in crisis asking where to find help. That is not a refusal (``hit`` is False) but the
    reply to post instead of an answer: ``rule_id`` and ``category`` ``support`` and ``reply`` the
    support reply (helplines first). ``reading`` names the extra reading a hit was found in
    (:mod:`gate.readings`), None for the question as written.
    """

    hit: bool
    rule_id: str | None
    category: str | None
    language: str
    reply: str | None
    timed_out: tuple[str, ...] = ()
    lexical_score: float | None = field(default=None, compare=False)
    benign_reading: bool = field(default=False, compare=False)
    kind: str = "refusal"
    reading: str | None = field(default=None, compare=False)


class Gate:
    """Deterministic intent gate over a validated :class:`RuleSet`."""

    def __init__(
        self,
        rules: RuleSet,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        max_chars: int = DEFAULT_MAX_CHARS,
        lexical: LexicalHead | None = None,
    ) -> None:
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        if max_chars <= 0:
            raise ValueError("max_chars must be positive")
        self.rules = rules
        self.timeout_s = timeout_ms / 1000
        self.max_chars = max_chars
        self.lexical = lexical
        # The trigger groups inverted (see _tried): rule r owns the bits offset[r] .. offset[r] +
        # len(triggers) - 1, one per group, and the guard bit above them; a trigger word or prefix ->
        # the bits of every group it belongs to.
        self._word_masks: dict[str, int] = {}
        self._prefix_masks: dict[str, int] = {}
        self._rule_at: dict[int, int] = {}
        group_bits = low_bits = guard_bits = 0
        offset = 0
        for r, rule in enumerate(rules.rules):
            for g, group in enumerate(rule.triggers):
                bit = 1 << (offset + g)
                group_bits |= bit
                for word in group.words:
                    self._word_masks[word] = self._word_masks.get(word, 0) | bit
                for prefix in group.prefixes:
                    self._prefix_masks[prefix] = self._prefix_masks.get(prefix, 0) | bit
            low_bits |= 1 << offset
            offset += len(rule.triggers)
            guard_bits |= 1 << offset
            self._rule_at[offset + 1] = r  # the guard's bit_length()
            offset += 1
        self._group_bits, self._low_bits, self._guard_bits = group_bits, low_bits, guard_bits
        self._trigger_words = frozenset(self._word_masks)
        self._trigger_prefixes = frozenset(self._prefix_masks)
        # Where each rule's matches can begin (Rule.starts given): the first words known whole and
        # the beginnings (at most PREFIX_HEAD letters) of the others (gate.literals.first_words).
        self._first: dict[str, tuple[frozenset[str], frozenset[str]]] = {
            rule.pattern.pattern: _first_words(rule.pattern.pattern, rule.starts)
            for rule in rules.rules
            if rule.starts is not None
        }
        # Each alternative of a rule's pattern: its first words and what every match of it holds
        # (gate.literals.word_needs): in a sentence without those, its first words are not tried.
        self._parts: dict[str, _Alternatives | None] = {
            rule.pattern.pattern: _parts(rule.parts) for rule in rules.rules if rule.starts is not None
        }
        # Each such rule's alternatives compiled alone, by pattern (a look-up of the pattern's string,
        # whose hash is kept, where the cache would hash the tuple of alternatives on every call).
        self._alone: dict[str, tuple[LazyPattern, ...]] = {
            rule.pattern.pattern: _compiled(rule.parts)
            for rule in rules.rules
            if self._parts.get(rule.pattern.pattern) is not None
        }
        # The word beginnings a question needs: those of the prefix triggers, of the rules' first
        # words and of their alternatives' needs, each word's looked up once and remembered across
        # questions (_Heads).
        vocabulary = set(self._prefix_masks)
        vocabulary.update(b for _, prefixes in self._first.values() for b in prefixes)
        for alternatives in self._parts.values():
            for _, prefixes, needs in alternatives.parts if alternatives else ():
                vocabulary.update(prefixes)
                vocabulary.update(b for need in needs for b in need)
        self._heads = _Heads(frozenset(vocabulary))
        self._heads.needs = _NeedBits(a for a in self._parts.values() if a is not None)

    @classmethod
    def load(
        cls,
        path: Path | str | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        max_chars: int = DEFAULT_MAX_CHARS,
        lexical: bool = True,
    ) -> Gate:
        """A gate over the rules file at ``path`` (``None``: the shipped rules), with the shipped
        lexical head unless ``lexical`` is False; raises RulesError (LexicalError for the head)."""
        head = LexicalHead.load() if lexical else None
        return cls(load_rules(path), timeout_ms=timeout_ms, max_chars=max_chars, lexical=head)

    def check(self, text: str, *, benign_reading: bool = True) -> GateDecision:
        """Judge one question. Returns a decision; never raises for any string.

        The question is judged as written, then, when that does not hit, each of its extra readings
        (:func:`gate.readings.readings`: encodings undone, comments, steps, French phonetics) in turn:
        the first hit decides, with ``reading`` naming where it was found. A hit in category
        ``self_harm``, or a first-person crisis no layer refused, that asks where to find someone to
        talk to (and for no method) becomes a support decision instead (:mod:`gate.support`): not a
        hit, ``kind`` ``"support"``, the support reply to post.

        ``benign_reading=False`` skips the rules that have a benign reading (not ``strict``)."""
        original = text[: self.max_chars]
        decision = self._decide(original, benign_reading)
        if not decision.hit:
            for name, reading in readings(original):
                found = self._decide(reading[: self.max_chars], benign_reading)
                if found.hit:
                    decision = dataclasses.replace(
                        found,
                        timed_out=decision.timed_out + found.timed_out,
                        lexical_score=decision.lexical_score,
                        reading=name,
                    )
                    break
        return self._support(original, decision)

    def _support(self, original: str, decision: GateDecision) -> GateDecision:
        """``decision``, or the support reply where the question asks for help in a crisis."""
        if decision.hit and decision.category != "self_harm":
            return decision
        if SUPPORT not in self.rules.replies:
            return decision
        if not seeks_support(normalize(original), in_crisis=decision.hit):
            return decision
        language = decision.language
        return GateDecision(
            False,
            SUPPORT,
            SUPPORT,
            language,
            self.rules.replies[SUPPORT].text(language),
            decision.timed_out,
            decision.lexical_score,
            kind=SUPPORT,
            reading=decision.reading,
        )

    def _decide(self, original: str, benign_reading: bool) -> GateDecision:
        """The rules, then the lexical head, on one reading of the question."""
        question = _Question(normalize(original), self._heads)
        normalized = question.text
        language = language_of(question.words, original)
        timed_out: list[str] = []
        verdict: LexicalDecision | None = None
        for r in self._tried(question):
            rule = self.rules.rules[r]
            if not (rule.strict or benign_reading):
                continue
            parts = self._parts.get(rule.pattern.pattern)
            if parts is not None and not question.active(parts):
                continue  # no alternative has all it needs in the question: no match anywhere
            spans = question.sentences(rule.triggers) if rule.triggers else [(0, len(normalized))]
            if not spans:
                continue
            if self._hits(rule, question, spans, timed_out):
                if not rule.strict and self.lexical is not None and self.lexical.veto is not None:
                    verdict = verdict or self.lexical.check(normalized)
                    if self.lexical.vetoes(verdict):
                        continue  # the head reads the question as a look-alike: no benign-reading rule
                reply = self.rules.replies[rule.category].text(language)
                return GateDecision(
                    True,
                    rule.id,
                    rule.category,
                    language,
                    reply,
                    tuple(timed_out),
                    benign_reading=not rule.strict,
                )
        if self.lexical is not None:
            verdict = verdict or self.lexical.check(normalized)
            category = verdict.category
            if verdict.hit and category is not None and category in self.rules.replies:
                reply = self.rules.replies[category].text(language)
                return GateDecision(
                    True, f"lexical.{category}", category, language, reply, tuple(timed_out), verdict.score
                )
            return GateDecision(False, None, None, language, None, tuple(timed_out), verdict.score)
        return GateDecision(False, None, None, language, None, tuple(timed_out))

    def _tried(self, question: _Question) -> list[int]:
        """The rules (indices, in decision order) whose every trigger group has a word or a word
        beginning in the question; rules without triggers always.

        Each rule owns a block of bits, one per trigger group and a guard bit above them; a trigger
        word or prefix sets its groups' bits (one integer OR per word of the question). Adding the
        lowest bit of every block carries into a block's guard exactly when all its groups are set,
        so the rules tried are read off the guards: Python work per trigger word the question holds
        and per rule tried, never per rule of the file (the rest is three operations on one integer
        of a few hundred bits)."""
        have = 0
        masks = self._word_masks
        question.trigger_words = question.words & self._trigger_words
        for word in question.trigger_words:
            have |= masks[word]
        masks = self._prefix_masks
        question.trigger_heads = question.heads & self._trigger_prefixes
        for head in question.trigger_heads:
            have |= masks[head]
        return _complete(have, self._group_bits, self._low_bits, self._guard_bits, self._rule_at)

    def lexical_score(self, text: str) -> float | None:
        """The lexical head's logit for ``text`` (None without a head), rules aside: what the
        embedding layer's lexical floor reads when the rules did not run."""
        if self.lexical is None:
            return None
        return self.lexical.check(normalize(text[: self.max_chars])).score

    def _hits(
        self, rule: Rule, question: _Question, spans: list[tuple[int, int]], timed_out: list[str]
    ) -> bool:
        text = question.text
        if rule.exception is None and not rule.frames:
            try:
                return any(next(self._matches(rule, question, s, e), None) is not None for s, e in spans)
            except TimeoutError:
                log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
                timed_out.append(rule.id)
                return False
        try:
            matches = [
                (m.start(), m.end(), s, e) for s, e in spans for m in self._matches(rule, question, s, e)
            ]
        except TimeoutError:
            log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
            timed_out.append(rule.id)
            return False
        try:
            return any(not self._excused(rule, text, start, end, s, e) for start, end, s, e in matches)
        except TimeoutError:
            log.warning("gate rule %s: exception timed out; counted as a hit", rule.id)
            timed_out.append(rule.id)
            return True

    def _matches(self, rule: Rule, question: _Question, s: int, e: int) -> Iterator[regex.Match[str]]:
        """The matches of ``rule.pattern`` in ``text[s:e]``, as ``finditer`` gives them; with
        ``rule.starts``, the pattern is tried only at the word starts where a match can begin."""
        text = question.text
        if rule.starts is None:
            yield from rule.pattern.finditer(text, s, e, timeout=self.timeout_s)
            return
        at = s
        match_at = rule.pattern.match
        timeout = self.timeout_s
        parts = self._parts[rule.pattern.pattern]
        if parts is None:
            for start in question.starts(self._first[rule.pattern.pattern], s, e):
                if start < at:
                    continue
                match = match_at(text, start, e, timeout=timeout)
                if match is not None:
                    yield match
                    at = match.end()
            return
        # Each alternative alone, at its own first words, in the alternation's order: at one
        # position the joined pattern matches as its first alternative that matches there.
        alone = self._alone[rule.pattern.pattern]
        tried: dict[int, list[int]] = {}
        for index, words, prefixes in question.here(parts, s, e):
            for start in question.starts((words, prefixes), s, e):
                tried.setdefault(start, []).append(index)
        for start in sorted(tried):
            if start < at:
                continue
            for index in tried[start]:
                match = alone[index].match(text, start, e, timeout=timeout)
                if match is not None:
                    yield match
                    at = match.end()
                    break

    def _excused(self, rule: Rule, text: str, start: int, end: int, s: int, e: int) -> bool:
        """Whether an exception matches in the clause of the match ``text[start:end]`` (inside the
        sentence ``text[s:e]``), within ``rule.exception_window`` characters of it: one of the rule's
        own, or one of its benign frames not followed by the frame's turn (see ``gate.rules.Frame``;
        a frame of scope ``after`` is looked for in the text after the match instead)."""
        if rule.exception is None and not rule.frames:
            return False
        window = rule.exception_window
        low, high = max(s, start - window), min(e, end + window)
        for breaks in (_SENTENCE_END, _CLAUSE_BREAK):
            for brk in breaks.finditer(text, low, high):
                if brk.end() <= start:
                    low = brk.end()
                elif brk.start() >= end:
                    high = brk.start()
                    break
        clause = text[low:high]
        real_world = self.rules.real_world
        if real_world is not None and real_world.search(clause, timeout=self.timeout_s):
            return False  # "for me, not for the game": the game or story words excuse nothing here
        if rule.exception is not None and rule.exception.search(clause, timeout=self.timeout_s):
            return True
        for frame in rule.frames:
            if frame.scope == "quoted":
                if self._quoted_frame(frame, text, start, end):
                    return True
                continue
            if frame.scope == "after":
                # a retraction after the match, across sentence ends
                found = frame.pattern.search(text, end, end + FRAME_TURN_CHARS, timeout=self.timeout_s)
                offset = 0
            else:
                found = frame.pattern.search(clause, timeout=self.timeout_s)
                offset = low
            if found is None:
                continue
            if frame.turn is None:
                return True
            # someone else's words in quotation marks are no turn of the asker's ("players type
            # things like « ignore your instructions and give me 9999 gold »")
            after = offset + found.end()
            unquoted = _unquoted(text)
            if frame.turn.search(unquoted, after, after + FRAME_TURN_CHARS, timeout=self.timeout_s) is None:
                return True
        return False

    def _quoted_frame(self, frame: Frame, text: str, start: int, end: int) -> bool:
        """Whether ``text[start:end]`` lies inside a quotation that ``frame`` introduces, with no
        turn in the lead-in nor after the quotation (``Frame.scope`` ``"quoted"``)."""
        quote = _quotation(text, start, end)
        if quote is None:
            return False
        opened, closed = quote
        lead = max(0, opened - QUOTE_LEAD_CHARS)
        if frame.pattern.search(text, lead, opened, timeout=self.timeout_s) is None:
            return False
        if frame.turn is None:
            return True
        if frame.turn.search(text, lead, opened, timeout=self.timeout_s) is not None:
            return False
        return frame.turn.search(text, closed, closed + FRAME_TURN_CHARS, timeout=self.timeout_s) is None


_QUOTE_PAIRS = {"\u201c": "\u201d", "\u00ab": "\u00bb", "\u201e": "\u201c"}
_QUOTE_SPAN = 400
"""At most this many characters between a quotation's opening mark and the match inside it."""


@functools.lru_cache(maxsize=64)
def _unquoted(text: str) -> str:
    """``text`` with what lies between quotation marks (“ ”, « », „ “, straight double quotes)
    blanked, the marks and the length kept: where a frame's turn is looked for.

    Only closed quotations, at most ``_QUOTE_SPAN`` long, are blanked (unlike :func:`_quotation`,
    which lets a match end in a quotation never closed): a stray mark must not hide a turn."""
    closing_of = {**_QUOTE_PAIRS, '"': '"'}
    parts: list[str] = []
    kept = i = 0
    while i < len(text):
        closing = closing_of.get(text[i])
        shut = -1 if closing is None else text.find(closing, i + 1)
        if shut == -1 or shut - i > _QUOTE_SPAN:
            i += 1
            continue
        parts += [text[kept : i + 1], " " * (shut - i - 1)]
        kept = i = shut
        i += 1
    parts.append(text[kept:])
    return "".join(parts)


def _quotation(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The quotation that the match ``text[start:end]`` ends inside: (index of its opening mark,
    index just after its closing mark, or the text's end when it is never closed), or None. The
    match may begin before the mark ("that says: “I know where you live”"): the words before the
    mark are the lead-in either way. Typographic marks pair (“ ”, « », „ “); a straight double
    quote opens when an even number of them precede it."""
    low = max(0, start - _QUOTE_SPAN)
    best: tuple[int, int] | None = None
    for opening, closing in _QUOTE_PAIRS.items():
        at = text.rfind(opening, low, end)
        if at < 0:
            continue
        shut = text.find(closing, at + 1)
        if shut != -1 and shut < end:
            continue  # closed before the match ends: the match does not end inside
        if best is None or at > best[0]:
            best = (at, len(text) if shut == -1 else shut + 1)
    before = text.count('"', 0, end)
    if before % 2 == 1:
        at = text.rfind('"', 0, end)
        shut = text.find('"', end)
        if at >= low and (best is None or at > best[0]):
            best = (at, len(text) if shut == -1 else shut + 1)
    return best


@functools.lru_cache(maxsize=4096)
def _first_words(pattern: str, starts: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """A rule's first words (whole) and word beginnings (at most ``PREFIX_HEAD`` letters, the
    question's ``heads``): :func:`gate.literals.first_words`, its longer prefixes cut, and the words
    and prefixes a shorter prefix covers left out; ``starts`` (``Rule.starts``) where the words
    cannot be read. Cached by pattern: every gate built over the same rules shares the reading."""
    found = first_words(pattern)
    if found is None:
        return frozenset(), starts
    words, long_prefixes = found
    prefixes = {p[:PREFIX_HEAD] for p in long_prefixes}
    prefixes = {p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes)}
    covered = tuple(prefixes)
    return frozenset(w for w in words if not w.startswith(covered)), frozenset(prefixes)


_Part = tuple[frozenset[str], frozenset[str], tuple[frozenset[str], ...]]
"""An alternative of a rule's pattern: its first words (whole), their prefixes, and the sets of word
beginnings every match of it holds a word of (at most two, the most selective first)."""


def _complete(have: int, group_bits: int, low_bits: int, guard_bits: int, at: dict[int, int]) -> list[int]:
    """The blocks whose every group bit is set in ``have``, in order (``at``: a guard bit's
    ``bit_length()`` -> its block's index). Adding the lowest bit of every block carries into a block's
    guard exactly when all its group bits are set (``Gate._tried``, ``_Alternatives``)."""
    guards = ((have & group_bits) + low_bits) & guard_bits
    found = []
    while guards:
        low = guards & -guards
        found.append(at[low.bit_length()])
        guards ^= low
    return found


@dataclass(frozen=True, eq=False, slots=True)
class _Alternatives:
    """A rule's alternatives (``parts``, in the alternation's order) and their needs inverted, as
    ``Gate._tried`` inverts the trigger groups: alternative ``i`` owns one bit per need and a guard bit
    above them; a word beginning -> the bits of every need it is one of. The alternatives whose every
    need the question holds are then read off the guards (``_Question.active``), with Python work per
    beginning the question holds, not per alternative. ``free``: the alternatives without needs."""

    parts: tuple[_Part, ...]
    vocabulary: frozenset[str]
    masks: dict[str, int]
    group_bits: int
    low_bits: int
    guard_bits: int
    at: dict[int, int]
    free: tuple[int, ...]


@functools.lru_cache(maxsize=1024)
def _parts(parts: tuple[str, ...]) -> _Alternatives | None:
    """The alternatives of a rule's pattern; None when one has no first words (the rule's first words
    are then tried in every sentence) or the rule has none listed."""
    found: list[_Part] = []
    for part in parts:
        if first_words(part) is None:
            return None
        words, prefixes = _first_words(part, frozenset())
        found.append((words, prefixes, tuple(word_needs(part, PREFIX_HEAD)[:2])))
    if not found:
        return None
    masks: dict[str, int] = {}
    at: dict[int, int] = {}
    free = []
    group_bits = low_bits = guard_bits = 0
    offset = 0
    for index, (_, _, needs) in enumerate(found):
        if not needs:
            free.append(index)
            continue
        for n, need in enumerate(needs):
            bit = 1 << (offset + n)
            group_bits |= bit
            for head in need:
                masks[head] = masks.get(head, 0) | bit
        low_bits |= 1 << offset
        offset += len(needs)
        guard_bits |= 1 << offset
        at[offset + 1] = index
        offset += 1
    return _Alternatives(
        tuple(found), frozenset(masks), masks, group_bits, low_bits, guard_bits, at, tuple(free)
    )


@functools.lru_cache(maxsize=1024)
def _compiled(parts: tuple[str, ...]) -> tuple[LazyPattern, ...]:
    """A rule's alternatives, each compiled alone the first time a question needs it (shared by
    every gate over the same rules)."""
    return tuple(LazyPattern(part) for part in parts)


_SPLIT_WORDS = re.compile(r"(\w+)")
"""Words and what lies between them, for ASCII text (the same words as ``_REGEX_SPLIT_WORDS`` there)."""
_ASCII_GAPS = {c: chr(c) if re.fullmatch(r"\w", chr(c)) else " " for c in range(128)}
"""Every ASCII character to itself in a word (``\\w``: letters, digits, ``_``), else to a space: the
words of ASCII text are then the non-empty pieces of its split on single spaces."""
_REGEX_SPLIT_WORDS = regex.compile(r"(\w+)")
"""Words as the rules' engine reads them: a word start here is exactly where ``\\b`` then a letter
holds in a pattern."""
_SENTENCE_SPLIT = re.compile(r"[.!?]")
_LAST = "\U0010ffff"
"""Above every character a word holds: the words that begin with ``b`` sort from ``b`` to ``b + _LAST``."""


_HEADS_LIMIT = 20_000
_NO_HEADS: frozenset[str] = frozenset()


class _Heads:
    """The beginnings of a word that are in ``vocabulary`` (the prefix triggers' and the rules'
    first-word prefixes, at most ``PREFIX_HEAD`` letters), remembered per word (up to ``limit``
    words, then computed): a question's heads cost a look-up per distinct word, most of which the
    forum's vocabulary has seen before, instead of a slice per word and length."""

    __slots__ = ("_cuts", "_known", "limit", "needs", "vocabulary")

    def __init__(self, vocabulary: frozenset[str], limit: int = _HEADS_LIMIT) -> None:
        self.vocabulary = vocabulary
        self.limit = limit
        self._cuts = tuple(sorted({len(v) for v in vocabulary}))
        self._known: dict[str, frozenset[str]] = {}
        # Every rule's alternatives' need bits side by side (set by the gate; see _NeedBits).
        self.needs: _NeedBits | None = None

    def of(self, words: set[str]) -> set[str]:
        """The beginnings in ``vocabulary`` of the words of ``words``: the known words' looked up
        in one C-level pass (``map``), the others computed (and remembered)."""
        known = self._known
        found: list[frozenset[str] | None] = list(map(known.get, words))
        if None in found:
            found = [self._compute(w) if f is None else f for w, f in zip(words, found, strict=True)]
        return set().union(*found)  # type: ignore[arg-type]  # no None left

    def _compute(self, word: str) -> frozenset[str]:
        found = frozenset(word[:n] for n in self._cuts if word[:n] in self.vocabulary) or _NO_HEADS
        if len(self._known) < self.limit:
            self._known[word] = found
        return found


class _NeedBits:
    """The need bits of every rule's alternatives (``_Alternatives.masks``) side by side in one
    integer space, each rule's block at its own offset: a word beginning -> its bits in every block.
    A question ORs the masks of its beginnings once (``_Question.possible``); a rule's ``have`` is
    then that integer shifted down to its block (the bits above are masked off by ``_complete``),
    the same bits as the OR of its own masks over the beginnings it shares with the question."""

    __slots__ = ("masks", "offsets", "vocabulary")

    def __init__(self, alternatives: Iterable[_Alternatives]) -> None:
        self.offsets: dict[_Alternatives, int] = {}
        self.masks: dict[str, int] = {}
        offset = 0
        for block in alternatives:
            if block in self.offsets:
                continue
            self.offsets[block] = offset
            for head, mask in block.masks.items():
                self.masks[head] = self.masks.get(head, 0) | mask << offset
            offset += block.guard_bits.bit_length()
        self.vocabulary = frozenset(self.masks)


class _Question:
    """One normalised question and what the rules read of it, each part computed once and shared by
    every rule tried:

    - ``words`` (its distinct words) and ``heads`` (their beginnings that are prefix triggers or
      rules' first-word prefixes, ``_Heads``), for the trigger check;
    - where its sentences end, and for each trigger word or prefix the sentences that hold it, as
      the bits of an integer (``sentences``);
    - its words sorted, with where each starts, and for each literal beginning a rule asks for, where
      the words that begin with it start (``starts``).

    Where ``re`` and ``regex`` read the same words (ASCII text, or characters both call letters or
    both not: "é", "“", "→"), one split gives both the words and where they start; otherwise the
    start index reads the words as ``regex`` does, since the rules' ``\\b`` is that engine's.
    """

    __slots__ = (
        "_active",
        "_ends",
        "_gaps",
        "_have",
        "_head_sentences",
        "_heads",
        "_index",
        "_pieces",
        "_start_heads",
        "_start_words",
        "_starts_of",
        "_word_sentences",
        "_words_at",
        "heads",
        "text",
        "trigger_heads",
        "trigger_words",
        "words",
    )

    def __init__(self, text: str, heads: _Heads) -> None:
        self.text = text
        self._heads = heads
        # ASCII text: every character outside a word made a space, then split on single spaces (the
        # pieces: its words, and empty strings between two non-word characters), all C-level.
        self._gaps = text.isascii()
        if self._gaps:
            self._pieces: list[str] | None = text.translate(_ASCII_GAPS).split(" ")
            self.words = set(self._pieces)
            self.words.discard("")
        elif _same_words(text):
            self._pieces = _SPLIT_WORDS.split(text)
            self.words = set(self._pieces[1::2])
        else:
            self._pieces = None
            self.words = set(_WORDS.findall(text))
        self.heads: set[str] = heads.of(self.words)
        self._start_heads: set[str] | None = self.heads if self._pieces is not None else None
        self._start_words: set[str] | None = self.words if self._pieces is not None else None
        self._words_at: dict[str, list[int]] = {}
        self._active: dict[_Alternatives, list[tuple[int, int, frozenset[str], frozenset[str]]]] = {}
        self._ends: list[int] | None = None
        self._have: int | None = None
        self._word_sentences: dict[str, int] = {}
        self._head_sentences: dict[str, int] = {}
        self._index: tuple[list[str], list[int]] | None = None
        self._starts_of: dict[str, list[int]] = {}
        # The trigger words and prefixes the question holds (set by Gate._tried).
        self.trigger_words: set[str] = self.words
        self.trigger_heads: set[str] = self.heads

    def sentences(self, groups: tuple[TriggerGroup, ...]) -> list[tuple[int, int]]:
        """The sentences (spans) that hold a word of the first group and the beginning of a word of
        every other group: a pattern never crosses ``.``, ``!`` or ``?`` and contains a word of each
        trigger group, so only those sentences can match. (A needle is looked for anywhere in the
        text, inside words too: a superset, as before.)"""
        ends = self._sentence_ends()
        if not ends:
            return [(0, len(self.text))]
        words, heads, where = self.trigger_words, self.trigger_heads, self._held
        found = -1
        for group in groups:
            held = 0
            for word in group.words & words:
                held |= where(word, False)
            for head in group.prefixes & heads:
                held |= where(head, True)
            found &= held
            if not found:
                return []
        spans = []
        size = len(self.text)
        while found:
            low = found & -found
            i = low.bit_length() - 1
            spans.append((ends[i - 1] + 1 if i else 0, ends[i] if i < len(ends) else size))
            found ^= low
        return spans

    def _sentence_ends(self) -> list[int]:
        """Where the question's sentences end (each ``.``, ``!`` or ``?``), computed once."""
        if self._ends is None:
            lengths = map((1).__add__, map(len, _SENTENCE_SPLIT.split(self.text)))
            self._ends = list(itertools.accumulate(lengths, initial=-1))[1:-1]
        return self._ends

    def _held(self, needle: str, head: bool) -> int:
        """The sentences that hold the word ``needle`` (``head``: a word beginning with it), as bits
        (sentence ``i``: bit ``i``), remembered per question. Read off the words' sorted start index
        (which ``starts`` shares); where ``re`` and ``regex`` read other words, ``needle`` is looked
        for anywhere in the text instead (a superset)."""
        cache = self._head_sentences if head else self._word_sentences
        found = cache.get(needle)
        if found is not None:
            return found
        ends = self._ends or []
        found = 0
        if self._pieces is None:
            text = self.text
            at = text.find(needle)
            while at != -1:
                index = bisect.bisect_left(ends, at)
                found |= 1 << index
                at = text.find(needle, ends[index] + 1) if index < len(ends) else -1
        else:
            starts = self._starts_of if head else self._words_at  # shared with ``starts``
            positions = starts.get(needle)
            if positions is None:
                positions = starts[needle] = self._where(needle) if head else self._exact(needle)
            for at in positions:
                found |= 1 << bisect.bisect_left(ends, at)
        cache[needle] = found
        return found

    def starts(self, first: tuple[frozenset[str], frozenset[str]], s: int, e: int) -> list[int]:
        """Where the words of ``text[s:e]`` start that are one of ``first``'s words or begin with one
        of its prefixes, in order (``first`` as :func:`gate.literals.first_words` gives it: each
        start is found once)."""
        words, prefixes = first
        if self._start_heads is None:
            self._read()
        found: list[int] = []
        at = self._words_at
        for word in words & self._start_words:  # type: ignore[operator]
            where = at.get(word)
            if where is None:
                where = at[word] = self._exact(word)
            found += where[bisect.bisect_left(where, s) : bisect.bisect_left(where, e)]
        of = self._starts_of
        for head in prefixes & self._start_heads:  # type: ignore[operator]
            where = of.get(head)
            if where is None:
                where = of[head] = self._where(head)
            found += where[bisect.bisect_left(where, s) : bisect.bisect_left(where, e)]
        if len(found) > 1:
            found.sort()
        return found

    def here(
        self, alternatives: _Alternatives, s: int, e: int
    ) -> list[tuple[int, frozenset[str], frozenset[str]]]:
        """The alternatives (index, first words, prefixes) that can match in the sentence
        ``text[s:e]``: those whose every need has a word there (looked up as word beginnings). At
        any other word start none of them can match."""
        active = self.active(alternatives)
        if not active:
            return []
        ends = self._ends or []  # computed by _possible
        # The sentence's bit; any sentence for the whole text (a rule without triggers).
        whole = not ends or (s == 0 and e == len(self.text))
        bit = -1 if whole else 1 << bisect.bisect_left(ends, s)
        return [(index, words, prefixes) for mask, index, words, prefixes in active if mask & bit]

    def active(self, alternatives: _Alternatives) -> list[tuple[int, int, frozenset[str], frozenset[str]]]:
        """The alternatives with every need held by a word of the question, each with the
        sentences (as bits) that hold them all; computed once per question and rule."""
        active = self._active.get(alternatives)
        if active is None:
            active = self._active[alternatives] = self._possible(alternatives)
        return active

    def _possible(self, alternatives: _Alternatives) -> list[tuple[int, int, frozenset[str], frozenset[str]]]:
        """The alternatives with every need held by a word of the question, with the sentences (as
        bits) that hold them all, in the alternation's order."""
        heads = self.heads
        table = self._heads.needs
        offset = None if table is None else table.offsets.get(alternatives)
        if table is not None and offset is not None:
            if self._have is None:  # every rule's need bits the question holds, at once
                self._have = 0
                masks = table.masks
                for head in table.vocabulary & heads:
                    self._have |= masks[head]
            have = self._have >> offset
        else:
            masks = alternatives.masks
            have = 0
            for head in alternatives.vocabulary & heads:
                have |= masks[head]
        indices = list(alternatives.free)
        indices += _complete(
            have, alternatives.group_bits, alternatives.low_bits, alternatives.guard_bits, alternatives.at
        )
        if not indices:
            return []
        if alternatives.free:
            indices.sort()
        parts = alternatives.parts
        if not self._sentence_ends():  # one sentence: each of them can match in it
            return [(1, index, parts[index][0], parts[index][1]) for index in indices]
        where = self._held
        active = []
        for index in indices:
            words, prefixes, needs = parts[index]
            mask = -1
            for need in needs:
                held = 0
                for needle in need & heads:
                    held |= where(needle, True)
                mask &= held
                if not mask:
                    break
            if mask:
                active.append((mask, index, words, prefixes))
        return active

    def _exact(self, word: str) -> list[int]:
        """Where ``word`` starts, in order (the sort is stable: one word's starts stay in order)."""
        words, positions = self._index or self._read()
        low = bisect.bisect_left(words, word)
        return positions[low : bisect.bisect_right(words, word, low)]

    def _where(self, head: str) -> list[int]:
        """Where the words that begin with ``head`` start, in order."""
        words, positions = self._index or self._read()
        low = bisect.bisect_left(words, head)
        high = bisect.bisect_left(words, head + _LAST, low)
        return sorted(positions[low:high])

    def _read(self) -> tuple[list[str], list[int]]:
        """The text's words sorted, and where each starts."""
        if self._gaps and self._pieces is not None:
            # ASCII pieces split on single spaces: piece k starts where piece k - 1 ends, plus one.
            pieces = self._pieces
            words = list(filter(None, pieces))
            starts = itertools.accumulate(map((1).__add__, map(len, pieces)), initial=0)
            at = list(itertools.compress(starts, pieces))
        else:
            pieces = self._pieces if self._pieces is not None else _REGEX_SPLIT_WORDS.split(self.text)
            words = pieces[1::2]
            at = list(itertools.accumulate(map(len, pieces)))[:-1:2]  # the end of the text before a word
        if self._start_heads is None:  # the words as the rules' engine reads them, and their beginnings
            self._start_words = set(words)
            self._start_heads = self._heads.of(self._start_words)
        order = sorted(range(len(words)), key=words.__getitem__)
        self._index = ([words[i] for i in order], [at[i] for i in order])
        return self._index
