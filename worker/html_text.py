"""Cooked HTML → plain text for embedding, with deliberate choices about quotes, code and media.

- ``<aside class="quote">`` quoting a forum post (``data-topic`` and ``data-post``, ``worker.quotes``) is
  DROPPED: the quoted post is indexed on its own and is the one cited for its words, and keeping the
  quote would make a reply match the question it quotes (the seed measured that adding another post's
  text to a post costs retrieval points). A quote that names no post (an unattributed ``[quote]``,
  ``[quote=name]``: text pasted from elsewhere, "[quote]…[/quote] works, thanks") is KEPT without its
  attribution line, like a plain ``<blockquote>`` (documentation, an error message): the post is its
  only place in the forum, so dropping it lost the answer.
- ``<pre>`` code blocks are KEPT but each is clipped to ``CODE_BLOCK_CHARS`` characters: the first
  lines of code carry the identifiers people search for, and a 300-line dump would otherwise eat the
  whole token budget. Inline ``<code>`` is kept as is.
- Images, emoji, the lightbox's file-name/size line, scripts and styles are dropped; link and mention
  text is kept (not the URL).
- Block elements and ``<br>`` become line breaks (blank lines dropped); runs of spaces and code
  indentation collapse; HTML entities are decoded.
"""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

from worker.quotes import quote_attrs

CODE_BLOCK_CHARS = 600
_BLOCK = frozenset(
    {
        "p", "div", "br", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table",
        "blockquote", "pre", "details", "summary", "hr", "aside", "dd", "dt",
    }
)  # fmt: skip
_DROP = frozenset({"script", "style", "svg", "template"})
_VOID = frozenset(
    {"br", "hr", "img", "input", "meta", "link", "source", "wbr", "area", "col", "embed", "param", "track"}
)
_SPACES = re.compile(r"[ \t\f\v\u00a0]+")
_TAG = re.compile(r"<[^<>]*>")  # not [^>]: a run of "<" would make it quadratic
_SIMPLE_ENDS = ("</p>", "<br>", "<br/>", "<br />", "</li>", "</h1>", "</h2>", "</h3>", "</h4>", "</tr>")


class _TextParser(HTMLParser):
    """Collects text, skipping subtrees that must not reach the embedding."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip_depth = 0  # >0 while inside a dropped subtree
        self._stack: list[tuple[str, bool, bool]] = []  # (tag, opened a skip, is a kept quote)
        self._code: list[str] | None = None
        self._code_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag in ("br", "hr") and not self._skip_depth:
                self._emit("\n")
            return
        classes = ""
        for name, value in attrs:
            if name == "class" and value:
                classes = value
        names = classes.split()
        quote = None
        if tag == "aside" and "quote" in names:
            quote = quote_attrs(" ".join(f'{k}="{v or ""}"' for k, v in attrs if '"' not in (v or "")))
        # a kept quote's attribution line (" name:") is not the quoted text
        title = tag == "div" and "title" in names and bool(self._stack) and self._stack[-1][2]
        skip = (
            tag in _DROP
            or (quote is not None and quote.of_post)
            or (tag == "div" and "meta" in names)
            or title
        )
        self._stack.append((tag, skip, quote is not None and not skip))
        if skip:
            self._skip_depth += 1
            return
        if tag == "pre":
            self._code_depth += 1
            if self._code is None:
                self._code = []
            return
        if tag in _BLOCK:
            self._emit("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        # Pop to the matching open tag (cooked HTML is well formed; stray end tags are ignored).
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                for _name, skip, _quote in self._stack[i:]:
                    if skip:
                        self._skip_depth -= 1
                del self._stack[i:]
                break
        else:
            return
        if self._skip_depth:
            return
        if tag == "pre" and self._code_depth:
            self._code_depth -= 1
            if self._code_depth == 0 and self._code is not None:
                code = "".join(self._code).strip("\n")
                self._code = None
                if len(code) > CODE_BLOCK_CHARS:
                    code = code[:CODE_BLOCK_CHARS].rstrip() + " …"
                if code:
                    self.parts.append("\n" + code + "\n")
            return
        if tag in _BLOCK:
            self._emit("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            self._emit(data)

    def _emit(self, text: str) -> None:
        if self._code is not None:
            self._code.append(text)
        else:
            self.parts.append(text)


def html_to_text(cooked: str) -> str:
    """Plain text of a post's cooked HTML (see the module docstring for what is kept)."""
    if "<aside" not in cooked and "<pre" not in cooked and "<div" not in cooked and "<script" not in cooked:
        # Fast path for the common post (paragraphs, links, inline code, images): the choices above
        # only differ from "strip tags" for asides, code blocks, lightboxes and scripts.
        # str.replace runs in C: much cheaper than a regex for the few block ends cooked HTML uses.
        for end in _SIMPLE_ENDS:
            if end in cooked:
                cooked = cooked.replace(end, "\n")
        text = _TAG.sub("", cooked) if "<" in cooked else cooked
        return _tidy(unescape(text))
    parser = _TextParser()
    parser.feed(cooked)
    parser.close()
    return _tidy("".join(parser.parts))


def _tidy(text: str) -> str:
    # One line per block, no blank lines: line breaks carry no meaning for the embedding model.
    # str.strip mapped in C into a list: cheaper than two generators, and the backfill runs it per post.
    return "\n".join([line for line in map(str.strip, _SPACES.sub(" ", text).split("\n")) if line])
