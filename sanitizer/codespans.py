"""Inline code spans: found the way CommonMark finds them, written back in one canonical form.

Inside a code span Discourse shows text literally: markdown-it's linkify, Discourse's @mention and
#hashtag rules only ever look at plain text tokens, and the server extracts mentions from cooked HTML
where code is skipped. So a code span is the safe container for anything link-like we keep as text.
Only single-line spans are recognised; any other backtick is escaped by the emitter, so Discourse
cannot pair backticks differently from us. A span whose content holds ``|`` is not kept as code: in a
GFM table row the pipe would split the span and expose its content, so that content is sanitised as
ordinary text instead.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable

_RUN = re.compile(r"`+")


def extract_code_spans(line: str, slot: Callable[[str], str]) -> str:
    """``line`` with each code span replaced by ``slot(display content)``."""
    runs = [(m.start(), m.end()) for m in _RUN.finditer(line)]
    if len(runs) < 2:
        return line
    by_length: dict[int, list[int]] = defaultdict(list)
    for index, (start, end) in enumerate(runs):
        by_length[end - start].append(index)
    out: list[str] = []
    done = 0  # everything before this offset is already in ``out``
    for index, (start, end) in enumerate(runs):
        if start < done:
            continue
        backslashes = len(line[done:start]) - len(line[done:start].rstrip("\\"))
        opener = start + backslashes % 2  # an escaped first backtick is literal
        if opener == end:
            continue
        candidates = by_length[end - opener]
        at = bisect.bisect_right(candidates, index)
        if at == len(candidates):
            continue
        close_start, close_end = runs[candidates[at]]
        content = line[end:close_start]
        if "|" in content:
            continue
        out.append(line[done:opener])
        out.append(slot(_display(content)))
        done = close_end
    out.append(line[done:])
    return "".join(out)


def render_code_span(content: str) -> str:
    """``content`` as a code span that CommonMark reads back as exactly ``content``."""
    longest = max((len(run) for run in _RUN.findall(content)), default=0)
    fence = "`" * (longest + 1)
    pad = ""
    if content[:1] == "`" or content[-1:] == "`" or _strippable(content):
        pad = " "
    return f"{fence}{pad}{content}{pad}{fence}"


def _display(content: str) -> str:
    return content[1:-1] if _strippable(content) else content


def _strippable(content: str) -> bool:
    return len(content) >= 2 and content[0] == " " and content[-1] == " " and content.strip(" ") != ""
