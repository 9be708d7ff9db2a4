"""The gate itself: normalise a question, try the rules in order, return a decision.

Bounded work, never an exception for any input string:

- the question is cut to ``max_chars`` characters before normalisation (a longer post is judged on
  its beginning, where a mention's question is);
- every regex call carries ``timeout``; a rule whose *pattern* times out counts as no hit for that
  rule (the other rules still run), and a rule whose *exception* times out counts as a hit (its
  pattern did match, and the exception could not clear it). Either way the rule id is logged at
  WARNING, without the text, and listed in ``GateDecision.timed_out`` for the trace.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from gate.language import language_of
from gate.normalize import normalize
from gate.rules import Rule, RuleSet, TriggerGroup, load_rules

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 50
DEFAULT_MAX_CHARS = 4000
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What the gate decided about one question.

    ``hit`` is True when a rule matched; then ``rule_id``, ``category`` and ``reply`` (the category's
    canned reply in ``language``) are set. ``language`` is always the detected one ("fr" or "en").
    """

    hit: bool
    rule_id: str | None
    category: str | None
    language: str
    reply: str | None
    timed_out: tuple[str, ...] = ()


class Gate:
    """Deterministic intent gate over a validated :class:`RuleSet`."""

    def __init__(
        self, rules: RuleSet, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, max_chars: int = DEFAULT_MAX_CHARS
    ) -> None:
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
        if max_chars <= 0:
            raise ValueError("max_chars must be positive")
        self.rules = rules
        self.timeout_s = timeout_ms / 1000
        self.max_chars = max_chars
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
    ) -> Gate:
        """A gate over the rules file at ``path`` (``None``: the shipped rules); raises RulesError."""
        return cls(load_rules(path), timeout_ms=timeout_ms, max_chars=max_chars)

    def check(self, text: str) -> GateDecision:
        """Judge one question. Returns a decision; never raises for any string."""
        original = text[: self.max_chars]
        normalized = normalize(original)
        words = set(_WORDS.findall(normalized))
        heads = {word[:n] for word in words for n in self._head_lengths}
        language = language_of(words, original)
        timed_out: list[str] = []
        for rule in self.rules.rules:
            if not all(_satisfied(group, words, heads) for group in rule.triggers):
                continue
            if self._hits(rule, normalized, timed_out):
                reply = self.rules.replies[rule.category].text(language)
                return GateDecision(True, rule.id, rule.category, language, reply, tuple(timed_out))
        return GateDecision(False, None, None, language, None, tuple(timed_out))

    def _hits(self, rule: Rule, normalized: str, timed_out: list[str]) -> bool:
        try:
            if rule.pattern.search(normalized, timeout=self.timeout_s) is None:
                return False
        except TimeoutError:
            log.warning("gate rule %s: pattern timed out; counted as no hit", rule.id)
            timed_out.append(rule.id)
            return False
        if rule.exception is None:
            return True
        try:
            return rule.exception.search(normalized, timeout=self.timeout_s) is None
        except TimeoutError:
            log.warning("gate rule %s: exception timed out; counted as a hit", rule.id)
            timed_out.append(rule.id)
            return True


def _satisfied(group: TriggerGroup, words: set[str], heads: set[str]) -> bool:
    return not (group.words.isdisjoint(words) and group.prefixes.isdisjoint(heads))
