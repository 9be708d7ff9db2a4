"""An independent audit of sanitizer output: parse it with markdown-it and look at every token.

markdown-it-py implements the CommonMark parser Discourse's markdown-it is built on, so what it sees as
a link, an image or raw HTML is what Discourse would see. ``text_join`` is disabled so that an escaped
character (``text_special``) can be told from a raw one: a raw ``[`` left in a text token could still
start a Discourse BBCode tag, which markdown-it-py does not know. Plain text is then checked with rules
deliberately looser than Discourse's (linkify, mentions, hashtags, e-mails).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).disable("text_join")

# A host label as linkify-it reads it: its "pseudo letters" are every character but whitespace, control
# characters, punctuation and < > (so ASCII symbols such as $ + = ^ ` | ~ are letters of a host).
_LABEL = r"[^\s!-#%-*,-/:;<>?@\[-\]_{}]"
_LABEL_OR_HYPHEN = r"[^\s!-#%-*,./:;<>?@\[-\]_{}]"
_LINKISH = re.compile(
    r"(?i)(?<![a-z0-9+.-])(?:https?|ftp|mailto|javascript|vbscript|data|file):."
    rf"|//\w|www\.\w|{_LABEL}{_LABEL_OR_HYPHEN}*(?:\.[\w-]+)*\.[a-z]{{2}}"
    r"|\w@\w"
    # A URL glued to a word: no link, but copyable text that points somewhere.
    r"|(?:https?|ftps?|file)://"
)
_MENTION = re.compile(r"(?<![\w`])@\w")
_HASHTAG = re.compile(r"(?<!\w)#[\w:-]")


def audit(markdown: str, allowed_targets: Iterable[str]) -> list[str]:
    """Every way ``markdown`` could link, embed, ping or inject on Discourse; empty means clean."""
    allowed = set(allowed_targets)
    problems: list[str] = []
    for token in _MD.parse(markdown):
        if token.type == "html_block":
            problems.append(f"html block: {token.content!r}")
        if token.type == "inline" and token.children:
            problems.extend(_audit_inline(token.children, allowed))
    return problems


def _audit_inline(children: list[Token], allowed: set[str]) -> list[str]:
    problems: list[str] = []
    run: list[str] = []
    in_link = False

    def flush() -> None:
        text = "".join(run)
        run.clear()
        for word in text.split():
            for name, pattern in (("link-like", _LINKISH), ("mention", _MENTION), ("hashtag", _HASHTAG)):
                if pattern.search(word):
                    problems.append(f"{name} in plain text: {word!r}")

    for child in children:
        if child.type == "text":
            if "[" in child.content or "]" in child.content:
                problems.append(f"unescaped bracket in text: {child.content!r}")
            if not in_link:
                run.append(child.content)
        elif child.type == "text_special":
            if not in_link:
                run.append(child.content)
        elif child.type in ("em_open", "em_close", "strong_open", "strong_close", "s_open", "s_close"):
            continue  # Discourse's text rules may see across emphasis: keep the run going
        else:
            flush()
            if child.type == "link_open":
                in_link = True
                href = str(child.attrs.get("href", ""))
                if href not in allowed:
                    problems.append(f"foreign link: {href!r}")
            elif child.type == "link_close":
                in_link = False
            elif child.type == "image":
                problems.append(f"image: {child.attrs.get('src')!r}")
            elif child.type == "html_inline":
                problems.append(f"inline html: {child.content!r}")
    flush()
    return problems


_RENDER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
_FORMATTING = (
    "p br hr em strong s del code pre blockquote ul ol li h1 h2 h3 h4 h5 h6 table thead tbody tr th td"
)
_SAFE_TAGS = frozenset([*_FORMATTING.split(" "), "a"])


class _TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def rendered_tags(markdown: str) -> list[tuple[str, dict[str, str | None]]]:
    """The HTML tags markdown-it renders ``markdown`` to (raw HTML passed through, as Discourse would)."""
    collector = _TagCollector()
    collector.feed(_RENDER.render(markdown))
    collector.close()
    return collector.tags


def unsafe_tags(markdown: str, allowed_targets: Iterable[str]) -> list[str]:
    """Rendered tags outside the plain-formatting set, and links whose href is not allowed."""
    allowed = set(allowed_targets)
    bad = []
    for tag, attrs in rendered_tags(markdown):
        if tag not in _SAFE_TAGS:
            bad.append(tag)
        elif tag == "a" and attrs.get("href") not in allowed:
            bad.append(f"a href={attrs.get('href')!r}")
    return bad
