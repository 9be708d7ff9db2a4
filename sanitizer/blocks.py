"""Fenced code blocks versus prose, and the one canonical way we write a fence back.

Code in a fence is shown literally by Discourse (no links, mentions, hashtags or HTML), so its content
is kept verbatim. To make sure Discourse sees exactly the fences we saw, every fence is re-written in one
form that CommonMark opens in any context: at column 0, after a blank line, made of backticks longer than
any backtick run inside, with an info string reduced to ``[A-Za-z0-9_+.#-]``. Prose never contains a
line that could open a fence (its backticks and ``~~~`` runs are escaped by the emitter).

Fences are recognised at any indentation (LLMs indent them inside list items, often by four spaces),
which only ever turns more of the input into literal code; the content is dedented by the opener's
indentation, as CommonMark does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN = re.compile(r"( *)(`{3,}|~{3,})(.*)")
_INFO = re.compile(r"[^A-Za-z0-9_+.#-]")
_BACKTICKS = re.compile(r"`+")
_MAX_INFO = 32


@dataclass(frozen=True, slots=True)
class Block:
    """``fence`` (``info`` and verbatim ``text``) or ``prose`` (``text`` still to sanitise)."""

    kind: str
    text: str
    info: str = ""


def split_blocks(text: str) -> list[Block]:
    """Prose and fenced blocks in order; an unclosed fence runs to the end, as in CommonMark."""
    blocks: list[Block] = []
    prose: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opened = _OPEN.fullmatch(lines[i])
        if opened is None or (opened.group(2)[0] == "`" and "`" in opened.group(3)):
            prose.append(lines[i])
            i += 1
            continue
        indent, fence, info = len(opened.group(1)), opened.group(2), opened.group(3)
        closing = re.compile(rf" *{re.escape(fence[0])}{{{len(fence)},}}[ \t]*")
        body: list[str] = []
        i += 1
        while i < len(lines) and closing.fullmatch(lines[i]) is None:
            body.append(_dedent(lines[i], indent))
            i += 1
        i += 1  # the closing fence (or the end of the text)
        if prose:
            blocks.append(Block("prose", "\n".join(prose)))
            prose = []
        blocks.append(Block("fence", "\n".join(body), _clean_info(info)))
    if prose:
        blocks.append(Block("prose", "\n".join(prose)))
    return blocks


def render_fence(block: Block) -> str:
    """The block as a backtick fence no line of its content can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(block.text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{block.info}\n{block.text}\n{fence}" if block.text else f"{fence}{block.info}\n{fence}"


def _dedent(line: str, indent: int) -> str:
    stripped = len(line) - len(line.lstrip(" "))
    return line[min(stripped, indent) :]


def _clean_info(info: str) -> str:
    words = info.strip().split()
    return _INFO.sub("", words[0])[:_MAX_INFO] if words else ""
