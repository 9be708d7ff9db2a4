"""Passes that remove link-producing syntax from prose, keeping the words a reader needs.

Each pass works on prose in which code spans, citation runs and backslash escapes are already private
placeholder characters, so nothing here can reach inside them. Each returns the new text and adds a
short reason code to ``reasons`` when it changed something. None of them needs to be perfect: whatever
they miss is still made inert by the emitter (every ``[``, ``]``, ``<`` and backtick left in prose is
escaped, and link-like words go into code spans). They exist so that the reply reads well.
"""

from __future__ import annotations

import bisect
import html.entities
import re

import bleach

from sanitizer.text import clean_char

# <scheme:...> and <user@host> (CommonMark autolinks): keep the address as text, the emitter wraps it.
_AUTOLINK = re.compile(
    r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]{0,2000})>"
    r"|<([A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?)>"
)

# Discourse BBCode: the tags go, the words between them stay; images go entirely.
_BBCODE_NAMES = (
    "url|img|quote|email|b|i|u|s|code|size|color|colour|font|spoiler|details|summary|poll|date|"
    "date-range|wrap|grid|chart|list|ul|ol|li|left|center|right|justify|table|tr|td|th|hr|br|youtube|"
    "video|audio|iframe|embed|mention|hashtag|highlight|sup|sub|strike|event|calendar|template|kbd|blur|"
    "avatar|upload|attachment|media|indent|h1|h2|h3|h4|h5|h6|spoil|noparse|anchor|topic|post|user|mail"
)
_BBCODE_IMAGE = re.compile(r"\[img(?:[= ][^\]\n]{0,500})?\][^\[]{0,2000}\[/img\]", re.IGNORECASE)
_BBCODE_TAG = re.compile(rf"\[/?(?:{_BBCODE_NAMES})(?:[= ][^\[\]\n]{{0,500}})?\]", re.IGNORECASE)

# [label]: destination — the whole line goes (Markdown reference definitions and footnote definitions).
_DEFINITION = re.compile(r"^ {0,3}\[[^\[\]\n]{1,999}\]:[^\n]*(?:\n|$)", re.MULTILINE)

# What CommonMark (and so markdown-it) treats as raw inline HTML; any other "<" is plain text.
_VALUE = r"""(?:[^\s"'=<>`]{1,1000}|'[^']{0,1000}'|"[^"]{0,1000}")"""
_ATTR = rf"(?:\s+[A-Za-z_:][A-Za-z0-9_.:-]{{0,64}}(?:\s*=\s*{_VALUE})?)"
_TAG = re.compile(
    rf"<(?:[A-Za-z][A-Za-z0-9-]{{0,64}}{_ATTR}{{0,64}}\s*/?>|/[A-Za-z][A-Za-z0-9-]{{0,64}}\s*>)"
)
# Comments, processing instructions, CDATA and declarations: an opener and the first closer after it.
_SPANS = (("<!-->", ""), ("<!--->", ""), ("<!--", "-->"), ("<?", "?>"), ("<![CDATA[", "]]>"), ("<!", ">"))
_LT = re.compile("<")
_RAW_OPEN = re.compile(r"<(script|style)\b[^<>]{0,1000}>", re.IGNORECASE)
_RAW_CLOSE = re.compile(r"</(script|style)\s*>", re.IGNORECASE)
_ENTITY = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z][A-Za-z0-9]{0,31}));")

_MAX_DESTINATION = 2000
_MAX_DEPTH = 32


def strip_autolinks(text: str, reasons: set[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        reasons.add("autolink")
        return match.group(1) or match.group(2)

    return _AUTOLINK.sub(replace, text)


# An explicit URL in prose: a web or script scheme, or ``www.``. Placeholders (plane 15/16 private
# use: code spans, citations, escapes) end the match, and so does trailing sentence punctuation.
# A scheme glued to a word (``herehttps://evil.example``) is cut too: no link on Discourse, but a URL a
# reader could copy. Glued, only the unambiguous forms count (``://`` or a script scheme), so that
# ``metadata:`` or ``profile:`` in prose stay.
_EXPLICIT_URL = re.compile(
    r"(?:(?<![\w.+-])(?:(?:https?|ftps?|javascript|vbscript|data|file):|www\.)"
    r"|(?<=\w)(?:(?:https?|ftps?|file)://|(?:javascript|vbscript):))[^\s<>\"'\U000f0000-\U0010ffff]*"
    r"[^\s<>\"'.,;:!?)\]}\U000f0000-\U0010ffff]",
    re.IGNORECASE,
)
URL_REMOVED = "(link removed)"


def remove_urls(text: str, reasons: set[str]) -> str:
    """Replace every explicit URL the LLM wrote in prose by ``(link removed)``.

    Other link-like words (bare domains, e-mails) are shown as inline code later, which Discourse never
    links; an explicit URL is not shown at all, so an instruction smuggled through the evidence ("link to
    http://evil.example") cannot even surface as copyable text.
    """
    removed = _EXPLICIT_URL.sub(URL_REMOVED, text)
    if removed != text:
        reasons.add("url-removed")
    return removed


def strip_bbcode(text: str, reasons: set[str]) -> str:
    stripped = _BBCODE_TAG.sub("", _BBCODE_IMAGE.sub("", text))
    if stripped != text:
        reasons.add("bbcode")
    return stripped


def strip_definitions(text: str, reasons: set[str]) -> str:
    stripped = _DEFINITION.sub("", text)
    if stripped != text:
        reasons.add("reference-definition")
    return stripped


def strip_links(text: str, reasons: set[str]) -> str:
    """``[text](dest)`` and ``[text][ref]`` → ``text``; ``![alt](dest)`` and ``![alt][ref]`` → nothing."""
    brackets = _pairs(text, "[", "]")
    parens = _pairs(text, "(", ")")
    out: list[str] = []

    def walk(lo: int, hi: int, depth: int) -> None:
        i = lo
        while i < hi:
            close = brackets.get(i, hi)
            if text[i] != "[" or close >= hi or depth >= _MAX_DEPTH:
                out.append(text[i])
                i += 1
                continue
            after = close + 1
            end = parens.get(after, hi) if text[after : after + 1] == "(" else brackets.get(after, hi)
            if end >= hi or (text[after] == "(" and not _plausible_destination(text[after + 1 : end])):
                out.append(text[i])
                i += 1
                continue
            if i > lo and text[i - 1] == "!":
                out.pop()
                reasons.add("image")
            else:
                reasons.add("link")
                walk(i + 1, close, depth + 1)
            i = end + 1

    walk(0, len(text), 0)
    return "".join(out)


def strip_html(text: str, reasons: set[str]) -> str:
    """Remove every HTML tag and comment with bleach (no tag allowed); other ``<`` become ``&lt;``.

    Only what CommonMark would parse as HTML reaches bleach as markup, so prose such as ``a<b`` is not
    swallowed as the start of a tag. The result is HTML-escaped text: ``decode_entities`` reads it back.
    """
    text = _drop_raw_text_elements(text)
    closers = {closer: _offsets(text, closer) for _, closer in _SPANS if closer}
    found = False

    def guard(match: re.Match[str]) -> str:
        nonlocal found
        if _is_html(text, match.start(), closers):
            found = True
            return "<"
        return "&lt;"

    guarded = _LT.sub(guard, text)
    if not found:
        return guarded
    reasons.add("html")
    return bleach.clean(
        guarded, tags=frozenset(), attributes={}, protocols=frozenset(), strip=True, strip_comments=True
    )


def _is_html(text: str, at: int, closers: dict[str, list[int]]) -> bool:
    for opener, closer in _SPANS:
        if text.startswith(opener, at):
            if opener == "<!" and not text[at + 2 : at + 3].isalpha():
                break
            offsets = closers.get(closer, [])
            return not closer or bisect.bisect_left(offsets, at + len(opener)) < len(offsets)
    return _TAG.match(text, at) is not None


def _offsets(text: str, needle: str) -> list[int]:
    offsets = []
    at = text.find(needle)
    while at != -1:
        offsets.append(at)
        at = text.find(needle, at + 1)
    return offsets


def _drop_raw_text_elements(text: str) -> str:
    """``<script>``/``<style>`` elements go with their content (it is code, not words for a reader)."""
    closes: dict[str, list[re.Match[str]]] = {"script": [], "style": []}
    for match in _RAW_CLOSE.finditer(text):
        closes[match.group(1).lower()].append(match)
    starts = {name: [m.start() for m in found] for name, found in closes.items()}
    kept: list[str] = []
    done = 0
    for opening in _RAW_OPEN.finditer(text):
        name = opening.group(1).lower()
        at = bisect.bisect_left(starts[name], opening.end())
        if opening.start() < done or at == len(starts[name]):
            continue
        kept.append(text[done : opening.start()])
        done = closes[name][at].end()
    kept.append(text[done:])
    return "".join(kept)


def decode_entities(text: str) -> str:
    """HTML character references → characters (as markdown-it shows them); forbidden ones dropped."""
    return _ENTITY.sub(_decode, text)


def _decode(match: re.Match[str]) -> str:
    decimal, hexadecimal, name = match.groups()
    if name is not None:
        value = html.entities.html5.get(name + ";")
        if value is None:
            return match.group(0)
        return "".join(clean_char(ch) for ch in value)
    code = int(decimal) if decimal is not None else int(hexadecimal, 16)
    if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return clean_char(chr(code))


def _pairs(text: str, opening: str, closing: str) -> dict[int, int]:
    """Offsets of each matched ``opening`` → its ``closing`` (nesting respected), in linear time."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for index, ch in enumerate(text):
        if ch == opening:
            stack.append(index)
        elif ch == closing and stack:
            pairs[stack.pop()] = index
    return pairs


def _plausible_destination(inside: str) -> bool:
    return len(inside) <= _MAX_DESTINATION and "\n\n" not in inside
