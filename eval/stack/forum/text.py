"""Text helpers of the local forum: cooked HTML → plain text, raw → cooked, mentions, slugs."""

from __future__ import annotations

import html
import re

_TAG = re.compile(r"<[^>]+>")
_BLOCK_END = re.compile(r"</(p|div|li|h[1-6]|pre|blockquote|tr)>|<br\s*/?>", re.IGNORECASE)
_ASIDE = re.compile(r"<aside\b.*?</aside>", re.IGNORECASE | re.DOTALL)
_SPACES = re.compile(r"[ \t\r\f\v]+")
_NEWLINES = re.compile(r"\n{3,}")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`[^`\n]*`")
_QUOTE = re.compile(r"\[quote\b[^\]]*\].*?\[/quote\]", re.IGNORECASE | re.DOTALL)
# One quote block, its parameters apart (not nested: the composer writes one level).
_QUOTE_BLOCK = re.compile(r"\[quote(?:=([^\]\n]*))?\](.*?)\[/quote\]", re.IGNORECASE | re.DOTALL)
_MENTION = re.compile(r"(?<![\w@])@([\w][\w.-]*[\w]|[\w])")
_SLUG = re.compile(r"[^a-z0-9]+")


def html_to_text(cooked: str) -> str:
    """Plain text of cooked HTML (quotes and onebox asides dropped, like Discourse's search index)."""
    text = _ASIDE.sub(" ", cooked)
    text = _BLOCK_END.sub("\n", text)
    text = html.unescape(_TAG.sub("", text))
    text = _SPACES.sub(" ", text)
    return _NEWLINES.sub("\n\n", text).strip()


def cook(raw: str) -> str:
    """A small Markdown → HTML: paragraphs, mention links and quotes (enough for blurbs and the API
    shape). A ``[quote="name, post:N, topic:M"]`` becomes the ``aside`` Discourse's quote rule writes
    (``discourse-markdown-it/src/features/quotes.js``): class ``quote no-group``, ``data-username``,
    ``data-post``, ``data-topic`` (and ``data-full``), a ``div.title`` with the quote controls and
    " name:", then the quoted text in a ``blockquote``; an unattributed ``[quote]`` has neither
    attributes nor title."""
    out: list[str] = []
    pos = 0
    for block in _QUOTE_BLOCK.finditer(raw):
        out.extend(_paragraphs(raw[pos : block.start()]))
        out.append(_quote(block.group(1) or "", block.group(2)))
        pos = block.end()
    out.extend(_paragraphs(raw[pos:]))
    return "\n".join(out)


def _paragraphs(text: str) -> list[str]:
    out = []
    for para in (p.strip() for p in text.split("\n\n")):
        if not para:
            continue
        escaped = html.escape(para).replace("\n", "<br>")
        escaped = _MENTION.sub(
            lambda m: f'<a class="mention" href="/u/{m.group(1)}">@{m.group(1)}</a>', escaped
        )
        out.append(f"<p>{escaped}</p>")
    return out


def _quote(params: str, body: str) -> str:
    parts = [p.strip() for p in params.strip().strip('"').split(",")] if params.strip() else []
    username = parts[0] if parts else ""
    attrs = ['class="quote no-group"']
    if username:
        attrs.append(f'data-username="{html.escape(username)}"')
    fields = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
    for key, name in (("post", "data-post"), ("topic", "data-topic")):
        value = fields.get(key, "").strip()
        if value.isdigit() and int(value) > 0:
            attrs.append(f'{name}="{int(value)}"')
    if fields.get("full", "").strip() == "true":
        attrs.append('data-full="true"')
    title = (
        f'<div class="title">\n<div class="quote-controls"></div>\n {html.escape(username)}:</div>\n'
        if username
        else ""
    )
    inner = "\n".join(_paragraphs(body))
    return f"<aside {' '.join(attrs)}>\n{title}<blockquote>\n{inner}\n</blockquote>\n</aside>"


def mentioned_usernames(raw: str) -> list[str]:
    """Usernames ``@mentioned`` outside code and quotes, in order, without repeats."""
    text = _QUOTE.sub(" ", raw)
    text = _FENCE.sub(" ", text)
    text = _INLINE.sub(" ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(">"))
    seen: list[str] = []
    for match in _MENTION.finditer(text):
        name = match.group(1)
        if name.lower() not in (s.lower() for s in seen):
            seen.append(name)
    return seen


def slugify(title: str) -> str:
    slug = _SLUG.sub("-", title.lower()).strip("-")
    return slug[:80] or "topic"
