"""Write judged prose back as Markdown in one canonical, inert form.

Input: ``raw`` (prose where backslash escapes are placeholder characters and code spans and citation
runs are slot characters), the same text with escapes turned back into their characters (``display``),
the words to put in code spans, and what each slot stands for. Rules, each chosen so that the output is
safe whatever the context and reads back identically (that is what makes the sanitizer idempotent):

- ``\\``, ``[``, ``]`` and backticks are always escaped: no link, image, reference, BBCode tag, footnote
  or stray code span can start, and no fence can open.
- ``<`` is written ``&lt;``: no HTML tag, HTML block or autolink can start.
- ``&`` is written ``&amp;`` when an entity name could follow it, so no character reference is decoded.
- The first ``~`` of a run of three or more is escaped: no ``~~~`` fence can open.
- ``!`` right before a citation link is escaped: the link cannot become an image.
- Other characters are written as they are (emphasis, lists, headings, quotes, tables stay), and a
  character the author escaped stays escaped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sanitizer.codespans import render_code_span
from sanitizer.text import is_escape, is_slot

_ENTITY_AHEAD = re.compile(r"#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};|[A-Za-z][A-Za-z0-9]{0,31};")


@dataclass(frozen=True, slots=True)
class Slot:
    """What a slot character stands for: verbatim Markdown (a citation run) or code span content."""

    value: str
    code: bool


def emit_prose(raw: str, display: str, wraps: list[tuple[int, int, str]], slots: Mapping[str, Slot]) -> str:
    pieces: list[tuple[bool, str]] = []  # (is code, text)
    starts = {start: end for start, end, _ in wraps}
    i = 0
    while i < len(raw):
        end = starts.get(i)
        ch = raw[i]
        if end is not None:
            pieces.append((True, display[i:end]))
            i = end
            continue
        if is_slot(ch):
            slot = slots[ch]
            pieces.append((slot.code, slot.value))
        else:
            pieces.append((False, _char(display, i, escaped=is_escape(ch), raw=raw, slots=slots)))
        i += 1
    return _join(pieces)


def _char(display: str, i: int, *, escaped: bool, raw: str, slots: Mapping[str, Slot]) -> str:
    ch = display[i]
    if ch in "\\[]`":
        return "\\" + ch
    if ch == "<":
        return "&lt;"
    if ch == "&":
        return "&amp;" if _ENTITY_AHEAD.match(display, i + 1) else "&"
    if ch == "~" and display[i - 1 : i] != "~" and display[i : i + 3] == "~~~":
        return "\\~"
    if ch == "!" and i + 1 < len(raw) and is_slot(raw[i + 1]) and not slots[raw[i + 1]].code:
        return "\\!"
    return "\\" + ch if escaped else ch


def _join(pieces: list[tuple[bool, str]]) -> str:
    out: list[str] = []
    code: list[str] = []
    for is_code, text in pieces:
        if is_code:
            code.append(text)
            continue
        if code:
            out.append(render_code_span("".join(code)))
            code = []
        out.append(text)
    if code:
        out.append(render_code_span("".join(code)))
    return "".join(out)
