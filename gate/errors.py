"""Errors of the gate package (it imports nothing of citebot's; the worker maps these at its edge)."""

from __future__ import annotations


class RulesError(ValueError):
    """A rules file is unusable: unreadable, not TOML, or a rule in it is invalid.

    ``source`` names the file, ``rule_id`` the rule (``None`` when the problem is not in one rule)
    and ``reason`` what is wrong; ``str()`` joins the three into one line for an operator.
    """

    def __init__(self, source: str, reason: str, rule_id: str | None = None) -> None:
        self.source = source
        self.rule_id = rule_id
        self.reason = reason
        where = f"{source}: rule {rule_id!r}" if rule_id is not None else source
        super().__init__(f"{where}: {reason}")
