"""The intent gate: deterministic regex rules over a normalised question, with canned replies.

At run time it needs the standard library, ``regex`` and numpy (the embedding layer,
``gate.intent``, which ``import gate`` loads); no network, no model, nothing imported from the rest
of citebot. Its build
(``gate.build``, ``gate.manifest``, ``gate.train``: ``make gate``) also uses scipy and the core's
HTML reader and local embedder, and nothing at run time imports it::

    from gate import Gate, canned_text
    decision = Gate.load().check("how do I make a pipe bomb?")
    if decision.hit:
        post(canned_text(decision))   # starts with CANNED_MARKER: the sanitizer passes it untouched

See ``docs/gate.md`` for the rule language and how to fix or add a rule (edit, ``make gate``, test).
"""

from __future__ import annotations

from gate.errors import RulesError
from gate.intent import IntentDecision, IntentError, IntentLayer
from gate.language import detect_language
from gate.matcher import Gate, GateDecision
from gate.normalize import normalize
from gate.rules import Reply, Rule, RuleSet, load_rules, parse_rules

CANNED_MARKER = "<!-- citebot:canned -->"
"""A text that starts with this exact string is a canned reply: the sanitizer leaves it as written."""


def canned_text(decision: GateDecision) -> str:
    """The text to post for a refusal or a support decision: the marker, a newline, then the reply.

    Raises ValueError for a decision with nothing to post (neither a hit nor ``kind == "support"``).
    """
    if not (decision.hit or decision.kind == "support") or decision.reply is None:
        raise ValueError("canned_text() needs a decision that hit a rule or a support decision")
    return f"{CANNED_MARKER}\n{decision.reply}"


__all__ = [
    "CANNED_MARKER",
    "Gate",
    "GateDecision",
    "IntentDecision",
    "IntentError",
    "IntentLayer",
    "Reply",
    "Rule",
    "RuleSet",
    "RulesError",
    "canned_text",
    "detect_language",
    "load_rules",
    "normalize",
    "parse_rules",
]
