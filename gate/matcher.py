"""The gate itself: normalise a question, try the rules in order, return a decision.

A rule is tried only when its trigger groups all have a word in the question, and its pattern is
searched only in the sentences that hold a word of its first group (see :mod:`gate.rules`), and
there only at the word starts where one of its matches can begin (``Rule.starts``). An
exception is *scoped*: it excuses one match of the pattern only when it matches in that match's
clause (the sentence, cut at clause breaks such as ";", "but", "btw", "for real", "en vrai"),
within the rule's ``exception_window`` characters either side. The rule hits when one match is not
excused; strict rules have no exceptions. The first rule that hits decides. When no rule hits, the
lexical head (:mod:`gate.lexical`, when the gate has one) judges the words of each clause; its hit is
reported as rule ``lexical.<category>``. A hit of a rule with a benign reading (not ``strict``) is
dropped when the head scores the question under its ``veto`` (it reads like the look-alikes).

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
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import regex

from gate.language import language_of
from gate.lexical import LexicalDecision, LexicalHead
from gate.normalize import normalize
from gate.rules import Rule, RuleSet, TriggerGroup, load_rules

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
    information, not part of the decision's identity (left out of ``==``).
    """

    hit: bool
    rule_id: str | None
    category: str | None
    language: str
    reply: str | None
    timed_out: tuple[str, ...] = ()
    lexical_score: float | None = field(default=None, compare=False)


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
        # Word-beginning lengths the prefix triggers need (see Rule.triggers).
        self._head_lengths = tuple(
            sorted({len(p) for rule in rules.rules for group in rule.triggers for p in group.prefixes})
        )
        # The trigger groups inverted: a trigger word or prefix -> (rule, bit of its group). A question
        # then costs a look-up per word it holds, not a set test per rule and group.
        self._by_word: dict[str, list[tuple[int, int]]] = {}
        self._by_prefix: dict[str, list[tuple[int, int]]] = {}
        for r, rule in enumerate(rules.rules):
            for g, group in enumerate(rule.triggers):
                for word in group.words:
                    self._by_word.setdefault(word, []).append((r, 1 << g))
                for prefix in group.prefixes:
                    self._by_prefix.setdefault(prefix, []).append((r, 1 << g))
        self._trigger_words = frozenset(self._by_word)
        self._trigger_prefixes = frozenset(self._by_prefix)
        self._full = [(1 << len(rule.triggers)) - 1 for rule in rules.rules]
        # Every literal beginning where a rule's match can start (Rule.starts), and their lengths.
        self._start_vocabulary = frozenset().union(*(r.starts for r in rules.rules if r.starts is not None))
        self._start_lengths = tuple(sorted({len(b) for b in self._start_vocabulary}))

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

    def check(self, text: str) -> GateDecision:
        """Judge one question. Returns a decision; never raises for any string."""
        original = text[: self.max_chars]
        normalized = normalize(original)
        words = set(_WORDS.findall(normalized))
        heads = {word[:n] for word in words for n in self._head_lengths}
        language = language_of(words, original)
        timed_out: list[str] = []
        ends: list[int] | None = None
        starts: _Starts | None = None
        verdict: LexicalDecision | None = None
        for r in self._tried(words, heads):
            rule = self.rules.rules[r]
            if rule.triggers:
                if ends is None:
                    ends = [m.start() for m in _SENTENCE_END.finditer(normalized)]
                spans = _sentences(rule.triggers, words, heads, normalized, ends)
                if not spans:
                    continue
            else:
                spans = [(0, len(normalized))]
            if starts is None and rule.starts is not None:
                starts = _Starts(normalized, self._start_vocabulary, self._start_lengths)
            if self._hits(rule, normalized, spans, timed_out, starts):
                if not rule.strict and self.lexical is not None and self.lexical.veto is not None:
                    verdict = verdict or self.lexical.check(normalized)
                    if self.lexical.vetoes(verdict):
                        continue  # the head reads the question as a look-alike: no benign-reading rule
                reply = self.rules.replies[rule.category].text(language)
                return GateDecision(True, rule.id, rule.category, language, reply, tuple(timed_out))
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

    def _tried(self, words: set[str], heads: set[str]) -> list[int]:
        """The rules (indices, in file order) whose every trigger group has a word or a word
        beginning in the question; rules without triggers always."""
        groups = [0] * len(self._full)
        for word in words & self._trigger_words:
            for r, bit in self._by_word[word]:
                groups[r] |= bit
        for head in heads & self._trigger_prefixes:
            for r, bit in self._by_prefix[head]:
                groups[r] |= bit
        return [r for r, (have, full) in enumerate(zip(groups, self._full, strict=True)) if have == full]

    def lexical_score(self, text: str) -> float | None:
        """The lexical head's logit for ``text`` (None without a head), rules aside: what the
        embedding layer's lexical floor reads when the rules did not run."""
        if self.lexical is None:
            return None
        return self.lexical.check(normalize(text[: self.max_chars])).score

    def _hits(
        self,
        rule: Rule,
        normalized: str,
        spans: list[tuple[int, int]],
        timed_out: list[str],
        starts: _Starts | None = None,
    ) -> bool:
        if rule.exception is None:
            try:
                return any(
                    next(self._matches(rule, normalized, s, e, starts), None) is not None for s, e in spans
                )
            except TimeoutError:
                log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
                timed_out.append(rule.id)
                return False
        try:
            matches = [
                (m.start(), m.end(), s, e)
                for s, e in spans
                for m in self._matches(rule, normalized, s, e, starts)
            ]
        except TimeoutError:
            log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
            timed_out.append(rule.id)
            return False
        try:
            return any(not self._excused(rule, normalized, start, end, s, e) for start, end, s, e in matches)
        except TimeoutError:
            log.warning("gate rule %s: exception timed out; counted as a hit", rule.id)
            timed_out.append(rule.id)
            return True

    def _matches(
        self, rule: Rule, text: str, s: int, e: int, starts: _Starts | None
    ) -> Iterator[regex.Match[str]]:
        """The matches of ``rule.pattern`` in ``text[s:e]``, as ``finditer`` gives them; with
        ``rule.starts``, the pattern is tried only at the word starts where a match can begin."""
        if rule.starts is None or starts is None:
            yield from rule.pattern.finditer(text, s, e, timeout=self.timeout_s)
            return
        at = s
        for start in starts.positions(rule.starts, s, e):
            if start < at:
                continue
            match = rule.pattern.match(text, start, e, timeout=self.timeout_s)
            if match is not None:
                yield match
                at = match.end()

    def _excused(self, rule: Rule, text: str, start: int, end: int, s: int, e: int) -> bool:
        """Whether an exception matches in the clause of the match ``text[start:end]`` (inside the
        sentence ``text[s:e]``), within ``rule.exception_window`` characters of it."""
        if rule.exception is None:
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
        return rule.exception.search(text[low:high], timeout=self.timeout_s) is not None


def _sentences(
    groups: tuple[TriggerGroup, ...], words: set[str], heads: set[str], text: str, ends: list[int]
) -> list[tuple[int, int]]:
    """The sentences of ``text`` that hold a word of the first group and the beginning of a word of
    every other group: a pattern never crosses ``.``, ``!`` or ``?`` and contains a word of each
    trigger group, so only those sentences can match."""
    present = [(group.words & words) | (group.prefixes & heads) for group in groups]
    found: set[int] = set()
    for needle in present[0]:
        at = text.find(needle)
        while at != -1:
            index = bisect.bisect_left(ends, at)
            found.add(index)
            at = text.find(needle, ends[index] + 1) if index < len(ends) else -1
    spans = [(ends[i - 1] + 1 if i else 0, ends[i] if i < len(ends) else len(text)) for i in sorted(found)]
    if len(present) == 1:
        return spans
    return [
        (s, e)
        for s, e in spans
        if all(any(text.find(needle, s, e) != -1 for needle in needles) for needles in present[1:])
    ]


_REGEX_WORDS = regex.compile(r"\w+")
"""Words as the rules' engine reads them: a word start here is exactly where ``\\b`` then a letter
holds in a pattern."""


class _Starts:
    """Where each literal beginning of ``vocabulary`` starts a word, in the sentences of one
    normalised question, each sentence read once when a first rule is tried there: the positions of
    its words, the beginnings of each distinct word; then a rule's candidate positions are a few
    look-ups."""

    __slots__ = ("lengths", "sentences", "text", "vocabulary")

    def __init__(self, text: str, vocabulary: frozenset[str], lengths: tuple[int, ...]) -> None:
        self.text = text
        self.vocabulary = vocabulary
        self.lengths = lengths
        self.sentences: dict[tuple[int, int], tuple[dict[str, list[int]], dict[str, list[str]]]] = {}

    def _read(self, s: int, e: int) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        where: dict[str, list[int]] = {}
        for match in _REGEX_WORDS.finditer(self.text, s, e):
            where.setdefault(match.group(), []).append(match.start())
        heads: dict[str, list[str]] = {}
        for word in where:
            size = len(word)
            for n in self.lengths:
                if n > size:
                    break
                head = word[:n]
                if head in self.vocabulary:
                    heads.setdefault(head, []).append(word)
        self.sentences[(s, e)] = (where, heads)
        return where, heads

    def positions(self, beginnings: frozenset[str], s: int, e: int) -> list[int]:
        """The word starts in ``text[s:e]`` (a sentence, or the whole text) whose word begins with
        one of ``beginnings``, in order."""
        where, heads = self.sentences.get((s, e)) or self._read(s, e)
        words = [word for head in beginnings.intersection(heads) for word in heads[head]]
        if len(words) == 1:
            return where[words[0]]
        return sorted({p for word in words for p in where[word]})
