"""Quotes of forum posts inside a post: who and which post each one quotes, in raw and in cooked.

A member quotes a post with the composer's quote button, which writes
``[quote="username, post:N, topic:M"]…[/quote]`` into ``raw`` (``full:true`` when the whole post is
quoted; ``username:`` follows a display name where the forum shows names). Discourse cooks it
(``discourse-markdown-it/src/features/quotes.js``) into::

    <aside class="quote no-group" data-username="username" data-post="N" data-topic="M">
      <div class="title"><div class="quote-controls"></div><img class="avatar" …> username:</div>
      <blockquote><p>…</p></blockquote>
    </aside>

and records the quoted posts from that HTML (``QuotedPost.extract_from``: ``aside.quote[data-topic]``
with a non-zero ``data-post``). A ``[quote]`` without attribution cooks to the same ``aside`` with no
``data-*`` attribute: text from outside the forum, not a post of it.

What reads quotes, and why:

- ``backfill.evidence``: a member's post that quotes the bot is not evidence (its author's words are an
  answer to the bot, the quoted ones the bot's); a reply that quotes its parent is serialized without
  ``reply_to_user`` (``suppress_reply_when_quoting``), so reading the quote is how a quote-reply to
  the bot is recognised at all;
- ``worker.html_text``: a quote of a post is dropped from the text (the quoted post is indexed under
  its own id and is the one cited); an unattributed quote is kept (the post is its only place);
- ``worker.pipeline``: the posts a member quoted are not evidence of the answer to that post (the
  member has read them), so the bot never answers by quoting back what it was shown;
- ``worker.question``: what a member quoted is part of the question they ask (``quote_blocks``, and
  ``markdown_quotes`` for ``>`` lines: quoted text of no post, an error message, documentation).

Every scan is linear: one pass over tags or openers, no pattern that can backtrack over member text.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

# ``[quote]``, ``[quote=name]``, ``[quote="name, post:1, topic:2"]``: each alternative is one
# unbounded class followed by a delimiter it excludes, and no class crosses a ``[`` (an opener).
_RAW_OPEN = re.compile(r"\[quote(?:=(?:\"([^\"\[\]\n]*)\"|([^\[\]\n]*)))?\]", re.IGNORECASE)
_ASIDE = re.compile(r"<aside\b([^<>]*)>", re.IGNORECASE)
_RAW_TAG = re.compile(r"(\[/?quote(?:=[^\[\]\n]*)?\])", re.IGNORECASE)
# What a reply's Markdown adds around a sentence it quotes: links ``[1](url)``, code spans, bullets.
_LINK = re.compile(r"\[([^\[\]\n]*)\]\([^()\s]*\)")
_NOISE = re.compile(r"[`*_]+|^[ \t]*+(?:[-+•]|\d{1,9}[.)])[ \t]+", re.MULTILINE)
_SPACE = re.compile(r"\s+")
MIN_QUOTED_CHARS = 20
_ATTR = re.compile(r"""(?<![\w-])([\w-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")


@dataclass(frozen=True, slots=True)
class Quote:
    """One quote: whose words (``username``) and which post (``topic_id``, ``post_number``), each
    None when the quote does not say (an unattributed ``[quote]``)."""

    username: str | None = None
    topic_id: int | None = None
    post_number: int | None = None
    text: str = ""  # the quoted words (``quote_blocks`` only)

    @property
    def of_post(self) -> bool:
        """A quote of a forum post (Discourse links it and counts it in ``quoted_posts``)."""
        return bool(self.topic_id and self.post_number)


def raw_quotes(raw: str) -> tuple[Quote, ...]:
    """The ``[quote…]`` openers of ``raw``, in order (an opener is enough: Discourse keys on it)."""
    if "[" not in raw:
        return ()
    return tuple(_parse_params(m.group(1) or m.group(2) or "") for m in _RAW_OPEN.finditer(raw))


def cooked_quotes(cooked: str) -> tuple[Quote, ...]:
    """The ``aside.quote`` elements of cooked HTML, in order."""
    if "<aside" not in cooked.lower():
        return ()
    out: list[Quote] = []
    for tag in _ASIDE.finditer(cooked):
        attrs = quote_attrs(tag.group(1))
        if attrs is not None:
            out.append(attrs)
    return tuple(out)


def quote_attrs(attrs: str) -> Quote | None:
    """The quote an ``aside`` tag's attribute text describes, or None when it is not a quote."""
    values = {m.group(1).lower(): m.group(2) or m.group(3) or m.group(4) or "" for m in _ATTR.finditer(attrs)}
    if "quote" not in values.get("class", "").split():
        return None
    return Quote(
        username=values.get("data-username") or None,
        topic_id=_positive(values.get("data-topic")),
        post_number=_positive(values.get("data-post")),
    )


def post_quotes(cooked: str, raw: str | None) -> tuple[Quote, ...]:
    """The quotes of a post: read from the cooked HTML when there is one, else from ``raw``."""
    return cooked_quotes(cooked) if cooked else raw_quotes(raw or "")


def quotes_user(cooked: str, raw: str | None, usernames: Collection[str]) -> bool:
    """Does the post quote one of ``usernames`` (lower case)?"""
    return any(q.username is not None and q.username.lower() in usernames for q in post_quotes(cooked, raw))


def quoted_lines(raw: str) -> tuple[str, ...]:
    """The lines inside the ``[quote]`` blocks of ``raw`` (nested ones too), each normalised with
    :func:`plain` and at least ``MIN_QUOTED_CHARS`` long: what the member has already read."""
    if "[" not in raw:
        return ()
    depth = 0
    lines: list[str] = []
    for part in _RAW_TAG.split(raw):
        if _RAW_TAG.fullmatch(part):
            depth = max(0, depth - 1) if part[1] == "/" else depth + 1
        elif depth:
            lines.extend(line for line in map(plain, part.splitlines()) if len(line) >= MIN_QUOTED_CHARS)
    return tuple(dict.fromkeys(lines))


def plain(text: str) -> str:
    """``text`` without citation links (``[1](url)``; other links keep their text), code marks,
    emphasis and bullets, spaces collapsed, case folded: a sentence compares equal however a reply
    formatted it."""
    unlinked = _LINK.sub(lambda m: "" if m.group(1).strip().isdigit() else m.group(1), text)
    return _SPACE.sub(" ", _NOISE.sub("", unlinked)).strip(" ,;").casefold()


_BLOCK_TAG = re.compile(r"\[(/?)(quote|code)\b([^\]\n]*)\]", re.IGNORECASE)
_MD_QUOTE = re.compile(r"^[ \t]{0,3}>[ \t]?(.*)$", re.MULTILINE)


def quote_blocks(raw: str) -> list[Quote]:
    """The outermost ``[quote]`` blocks of ``raw`` with their text, in order (inner quotes stay in
    their text; nothing nests inside ``[code]``; an unclosed tag stays text, as Discourse renders it)."""
    if "[" not in raw:
        return []
    out: list[Quote] = []
    opened: list[tuple[str, re.Match[str]]] = []
    for match in _BLOCK_TAG.finditer(raw):
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
                params = start.group(3).strip().removeprefix("=").strip().strip('"')
                quote = _parse_params(params)
                out.append(
                    Quote(
                        quote.username,
                        quote.topic_id,
                        quote.post_number,
                        raw[start.end() : match.start()].strip(),
                    )
                )
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


def _parse_params(params: str) -> Quote:
    """``"name, post:N, topic:M[, full:true][, username:u]"`` as the quote rule splits it."""
    if not params.strip():
        return Quote()
    parts = [p.strip() for p in params.split(",")]
    username: str | None = parts[0] or None
    topic = post = None
    for part in parts[1:]:
        key, _, value = part.partition(":")
        key = key.strip().lower()
        if key == "post":
            post = _positive(value)
        elif key == "topic":
            topic = _positive(value)
        elif key == "username" and value.strip():
            username = value.strip()  # the first part was a display name
    return Quote(username, topic, post)


def _positive(value: str | None) -> int | None:
    value = (value or "").strip()
    if not value.isdigit() or len(value) > 12:
        return None
    number = int(value)
    return number if number > 0 else None
