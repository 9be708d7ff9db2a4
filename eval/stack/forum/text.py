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
    """A small Markdown → HTML: paragraphs and mention links (enough for blurbs and the API shape)."""
    paragraphs = [p.strip() for p in raw.split("\n\n") if p.strip()]
    out = []
    for para in paragraphs:
        escaped = html.escape(para).replace("\n", "<br>")
        escaped = _MENTION.sub(
            lambda m: f'<a class="mention" href="/u/{m.group(1)}">@{m.group(1)}</a>', escaped
        )
        out.append(f"<p>{escaped}</p>")
    return "\n".join(out)


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
