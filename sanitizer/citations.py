"""``[[n]]`` markers → links built from the evidence alone.

Accepted forms (tolerant spacing, runs separated by nothing, spaces or one comma)::

    [[1]]   [[ 1 ]]   [[1, 2]]   [[1;2]]   [[1 2]]   [[1]][[2]]   [[1]], [[2]]

A run becomes ``[1](/t/slug/12/3), [2](/t/other/40/1)``. A number absent from the evidence is dropped;
duplicates inside a run are collapsed. Our own output form ``[n](<link built for n>)`` is read back as a
citation (that is what makes sanitising twice a no-op); a ``[n](...)`` whose target is not the link
built for ``n`` is a forged citation and is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sanitizer.evidence import EvidenceSource, LinkGrain
from sanitizer.text import CITE_BASE

_MARKER = r"\[\[[ \t]*\d{1,12}(?:(?:[ \t]*[,;][ \t]*|[ \t]+)\d{1,12})*[ \t]*(?:[,;][ \t]*)?\]\]"
_TARGET = r"(?:https?://[A-Za-z0-9.:-]+(?:/[A-Za-z0-9._~-]+)*?)?/t/[a-z0-9-]+/\d{1,12}(?:/\d{1,12})?"
_OWN = rf"\[\d{{1,12}}\]\({_TARGET}\)"
_ONE = re.compile(rf"(?P<marker>{_MARKER})|\[(?P<n>\d{{1,12}})\]\((?P<target>{_TARGET})\)")
_CITE = rf"(?:{_MARKER}|{_OWN})"
_SEPARATOR = r"[ \t]*(?:,[ \t]*)?"
_RUN = re.compile(rf"(?P<lead>(?<![ \t])[ \t]*)(?P<run>{_CITE}(?:{_SEPARATOR}{_CITE})*)")
_MARKS = re.compile(rf"[{chr(CITE_BASE)}-\U0010fffd](?:{_SEPARATOR}[{chr(CITE_BASE)}-\U0010fffd])*")
_NUMBER = re.compile(r"\d{1,12}")
_TIGHT = frozenset(".,;:!?)\n")


@dataclass(slots=True)
class CitationLog:
    """What the resolver did, each number once, in order of first appearance."""

    cited: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    forged: bool = False
    _seen: dict[str, set[int]] = field(default_factory=lambda: {"cited": set(), "dropped": set()})

    def cite(self, numbers: list[int]) -> None:
        self._add(numbers, self.cited, self._seen["cited"])

    def drop(self, n: int) -> None:
        self._add([n], self.dropped, self._seen["dropped"])

    @staticmethod
    def _add(numbers: list[int], into: list[int], seen: set[int]) -> None:
        for n in numbers:
            if n not in seen:
                seen.add(n)
                into.append(n)


class CitationResolver:
    """Resolves citation runs against one evidence list and link options."""

    def __init__(self, evidence: Sequence[EvidenceSource], grain: LinkGrain, base_url: str) -> None:
        self._links = {source.n: source.link(grain, base_url) for source in evidence}
        self._known: dict[int, set[str]] = {}
        for source in evidence:
            forms = {source.link(g, b) for g in ("post", "topic") for b in {"", base_url}}
            self._known[source.n] = forms
        self.log = CitationLog()
        self._marks: list[list[int]] = []

    def mark(self, text: str) -> str:
        """``text`` with each citation run replaced by one mark character (removed if nothing is left).

        Marks are resolved by ``render`` once every other pass has run, so that runs which end up
        side by side (``[[1]]<img>[[1]]``) are merged and de-duplicated exactly as a second pass would.
        """
        return _RUN.sub(self._run, text)

    def render(self, text: str, slot: Callable[[str], str]) -> str:
        """Each sequence of marks (separated by nothing, spaces or one comma) → ``slot(links)``."""
        return _MARKS.sub(lambda m: self._render(m.group(0), slot), text)

    def _render(self, marks: str, slot: Callable[[str], str]) -> str:
        numbers = list(
            dict.fromkeys(n for ch in marks if ord(ch) >= CITE_BASE for n in self._marks[ord(ch) - CITE_BASE])
        )
        self.log.cite(numbers)
        return slot(", ".join(f"[{n}]({self._links[n]})" for n in numbers))

    def _run(self, match: re.Match[str]) -> str:
        numbers: list[int] = []
        for part in _ONE.finditer(match.group("run")):
            if part.group("marker") is not None:
                found = [int(n) for n in _NUMBER.findall(part.group("marker"))]
            else:
                n, target = int(part.group("n")), part.group("target")
                if target not in self._known.get(n, set()):
                    self.log.forged = True
                    self.log.drop(n)
                    continue
                found = [n]
            for n in found:
                if n not in self._links:
                    self.log.drop(n)
                elif n not in numbers:
                    numbers.append(n)
        if not numbers:
            following = match.string[match.end() : match.end() + 1]
            return "" if following == "" or following in _TIGHT else match.group("lead")
        self._marks.append(numbers)
        return match.group("lead") + chr(CITE_BASE + len(self._marks) - 1)
