"""Input hygiene and the private placeholder alphabet the other modules share.

The sanitizer replaces spans it has already judged (code spans, resolved citations, backslash escapes)
with single characters from Unicode private-use areas, so that later passes (links, BBCode, bleach,
entity decoding, link-like detection) cannot look inside them. Those areas are therefore removed from
the input first: a forged placeholder is impossible.
"""

from __future__ import annotations

import re

MAX_INPUT_CHARS = 100_000
"""Longer texts are refused (Discourse's own default limit is 32,000 characters)."""

ESC_BASE = 0xF000
"""``\\X`` (X an ASCII punctuation character) becomes ``chr(ESC_BASE + ord(X))``."""

SLOT_BASE = 0xF0000
"""Placeholder ``i`` (a code span or a rendered citation run) is ``chr(SLOT_BASE + i)`` (plane 15)."""

CITE_BASE = 0x100000
"""Citation run ``i`` is marked ``chr(CITE_BASE + i)`` until runs are merged and rendered."""

# Characters removed from every input: C0/C1 controls but tab and newline, bidirectional overrides and
# isolates (they disguise text), invisible zero-width characters (they hide a domain from the reader),
# Unicode "tag" characters (invisible ASCII smuggling), private-use areas (our placeholders), lone
# surrogates and non-characters. ZWJ and ZWNJ stay: emoji sequences and Persian script need them.
_FORBIDDEN = re.compile(
    "["
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2069\u180e\ufeff"
    "\ud800-\udfff\ue000-\uf8ff\ufdd0-\ufdef\ufffe\uffff"
    "\U000e0000-\U000e007f\U000f0000-\U0010ffff"
    "]"
)
_LINE_BREAKS = re.compile("\r\n?|[\u2028\u2029\x85]")

_ESCAPABLE = r"""!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~"""
_ESCAPE = re.compile(rf"\\([{_ESCAPABLE}])")


def clean_text(text: str) -> tuple[str, bool]:
    """Normalise line breaks to ``\\n`` and drop forbidden characters; say whether any were dropped."""
    text = _LINE_BREAKS.sub("\n", text)
    cleaned = _FORBIDDEN.sub("", text)
    return cleaned, cleaned != text


def clean_char(ch: str) -> str:
    """One decoded character, or ``""`` when it is forbidden (used for HTML character references)."""
    if ch in ("\r", "\x85", "\u2028", "\u2029"):
        return "\n"
    return "" if _FORBIDDEN.match(ch) else ch


def protect_escapes(text: str) -> str:
    """Replace each CommonMark backslash escape ``\\X`` by its private placeholder character."""
    return _ESCAPE.sub(lambda m: chr(ESC_BASE + ord(m.group(1))), text)


def is_escape(ch: str) -> bool:
    return ESC_BASE + 0x21 <= ord(ch) <= ESC_BASE + 0x7E


def unescape_char(ch: str) -> str:
    """The ASCII character a protected escape stands for (or the character itself)."""
    return chr(ord(ch) - ESC_BASE) if is_escape(ch) else ch


def is_slot(ch: str) -> bool:
    return ord(ch) >= SLOT_BASE
