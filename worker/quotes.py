"""Quotes of other posts in a post's raw Markdown: ``[quote="name, post:3, topic:42"]…[/quote]``.

The composer writes a quote of a post as BBCode whose parameter is split on commas: the first part is
the quoted author's name (a display name when the site shows those, then a ``username:`` part follows),
then ``post:N``, ``topic:T`` and ``full:true`` (Discourse's ``discourse-markdown-it`` ``quotes.js``,
which cooks it into ``<aside class="quote" data-username data-post data-topic>``). A ``>`` line is a
plain Markdown blockquote (an error message, documentation): quoted text, but of no post.

One linear pass over the tags (quotes nest; nothing nests inside ``[code]``; an unclosed tag stays
text, as Discourse renders it), like ``worker.addressing.drop_bbcode_blocks``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TAG = re.compile(r"\[(/?)(quote|code)\b([^\]\n]*)\]", re.IGNORECASE)
_MD_QUOTE = re.compile(r"^[ \t]{0,3}>[ \t]?(.*)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Quote:
    """One outermost quote: who and which post it quotes (None when the tag does not say), its text."""

    username: str
    post_number: int | None
    topic_id: int | None
    text: str


def raw_quotes(raw: str) -> list[Quote]:
    """The outermost ``[quote]`` blocks of ``raw``, in order (inner quotes stay in their text)."""
    if "[" not in raw:
        return []
    out: list[Quote] = []
    opened: list[tuple[str, re.Match[str]]] = []
    for match in _TAG.finditer(raw):
        closing, name = match.group(1) == "/", match.group(2).lower()
        if opened and opened[-1][0] == "code":
            if closing and name == "code":
                opened.pop()
            continue
        if not closing:
            opened.append((name, match))
        elif opened and opened[-1][0] == name:
            start = opened.pop()[1]
            if not opened and name == "quote":
                out.append(_quote(start.group(3), raw[start.end() : match.start()]))
    return out


def markdown_quotes(raw: str) -> list[str]:
    """The text of the ``>`` lines, one string per run of consecutive lines."""
    out: list[str] = []
    last_end = -2
    for match in _MD_QUOTE.finditer(raw):
        line = match.group(1).strip()
        if out and match.start() == last_end + 1:
            out[-1] = f"{out[-1]}\n{line}".strip()
        else:
            out.append(line)
        last_end = match.end()
    return [q for q in out if q]


def _quote(params: str, text: str) -> Quote:
    value = params.strip().removeprefix("=").strip().strip('"').strip()
    parts = [p.strip() for p in value.split(",")] if value else []
    username = parts[0] if parts else ""
    post_number = topic_id = None
    for part in parts[1:]:
        key, _, val = part.partition(":")
        key, val = key.strip().lower(), val.strip()
        if key == "post" and val.isdigit():
            post_number = int(val)
        elif key == "topic" and val.isdigit():
            topic_id = int(val)
        elif key == "username" and val:
            username = val
    return Quote(username, post_number, topic_id, text.strip())
