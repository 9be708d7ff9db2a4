"""The gate itself: normalise a question, try the rules in order, return a decision.

A rule is tried only when its trigger groups all have a word in the question, and its pattern is
searched only in the sentences that hold a word of its first group (see :mod:`gate.rules`). An
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
from dataclasses import dataclass, field
from pathlib import Path

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
        verdict: LexicalDecision | None = None
        for rule in self.rules.rules:
            # Every trigger group needs a word or a word beginning of the question. A plain loop, not
            # all() over a generator: this runs for every rule of every question.
            skip = False
            for group in rule.triggers:
                if group.words.isdisjoint(words) and group.prefixes.isdisjoint(heads):
                    skip = True
                    break
            if skip:
                continue
            if rule.triggers:
                if ends is None:
                    ends = [m.start() for m in _SENTENCE_END.finditer(normalized)]
                spans = _sentences(rule.triggers, words, heads, normalized, ends)
                if not spans:
                    continue
            else:
                spans = [(0, len(normalized))]
            if self._hits(rule, normalized, spans, timed_out):
                if not rule.strict and self.lexical is not None and self.lexical.veto is not None:
                    verdict = verdict or self.lexical.check(normalized)
                    if verdict.score < self.lexical.veto:
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

    def lexical_score(self, text: str) -> float | None:
        """The lexical head's logit for ``text`` (None without a head), rules aside: what the
        embedding layer's lexical floor reads when the rules did not run."""
        if self.lexical is None:
            return None
        return self.lexical.check(normalize(text[: self.max_chars])).score

    def _hits(self, rule: Rule, normalized: str, spans: list[tuple[int, int]], timed_out: list[str]) -> bool:
        if rule.exception is None:
            try:
                return any(rule.pattern.search(normalized, s, e, timeout=self.timeout_s) for s, e in spans)
            except TimeoutError:
                log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
                timed_out.append(rule.id)
                return False
        try:
            matches = [
                (m.start(), m.end(), s, e)
                for s, e in spans
                for m in rule.pattern.finditer(normalized, s, e, timeout=self.timeout_s)
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
