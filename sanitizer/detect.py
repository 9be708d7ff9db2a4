"""Words that Discourse would turn into a link, a onebox, a mention or a hashtag.

A *word* is a maximal run of characters that are not whitespace, not ``|``, ``<`` or ``>``, and not one of
our placeholders (code spans and citation links, which are separate tokens for markdown-it too). Every
word that contains anything link-like is put in a code span whole (minus surrounding punctuation), so no
rule of markdown-it or Discourse that scans plain text can see it. The tests are deliberately broader
than Discourse's own rules (any TLD of two letters, any ``@`` or ``#`` followed by a letter, digit or
``_``, IPv4 addresses, ``//``): wrapping a harmless word costs nothing, missing one would ping someone
or link somewhere.

What each test stands for:

- ``url``: a scheme with ``//``, a known scheme then ``:`` then more (``mailto:x``, ``javascript:x`` ...),
  ``//`` anywhere, ``www.``, a domain-like ``x.yz`` (before the dot, any character linkify takes in a
  host label: ASCII symbols such as ``$``, ``+`` and ``|`` included), an IPv4 address — markdown-it
  linkify (fuzzy links and e-mails included) and Discourse onebox.
- ``mention``: ``@`` then a word character — Discourse user and group mentions, and e-mail addresses.
- ``hashtag``: ``#`` then a word character, ``:`` or ``-`` — Discourse category and tag hashtags
  (its matcher allows letters, digits, ``_``, ``:`` and ``-`` after the ``#``).
"""

from __future__ import annotations

import re

from sanitizer.text import SLOT_BASE

_SCHEMES = (
    "https?|ftps?|sftp|mailto|javascript|vbscript|livescript|data|file|tel|sms|callto|xmpp|irc|ircs|news|"
    "nntp|snews|git|ssh|svn|wss?|magnet|blob|about|chrome|view-source|intent|market|skype|steam|discord|"
    "tg|slack|zoommtg|feed|webcal|facetime|maps|geo|bitcoin|upload|jar|ms-[a-z-]+"
)
# A "name" character: not whitespace, not ASCII punctuation other than "_".
_NAME = r"[^\s!-/:-@\[-^`{-~]"
# Emphasis markers may sit in between (``@*admin*``, ``evil.*com*``): treated as transparent.
_EM = r"[*_~]*"
# A character linkify-it accepts in a host label (its "pseudo letter"): anything but whitespace, control
# characters, Unicode punctuation and < >. ASCII symbols count: ``evil$.com``, ``a+b.com``, ``x|y.co``.
# ``~`` (a symbol) is left to the ``[*~]*`` that follows: in both, a run of ``~`` would be quadratic.
_HOST = r"[^\s!-#%-*,-/:;<>?@\[-\]_{}~]"
_URL = re.compile(
    rf"/{_EM}/|(?<![A-Za-z0-9+.-])(?:{_SCHEMES}):(?=.)|www\.|{_HOST}[*~]*\.{_EM}(?:[^\W\d_]{{2}}|xn--)|\d{{1,3}}(?:\.\d{{1,3}}){{3}}",
    re.IGNORECASE,
)
# ``|`` ends a word (table cells) but is a host letter to linkify: ``a|.com`` is caught by its ``.com``.
_TLD_AFTER_BAR = re.compile(rf"\.{_EM}(?:[^\W\d_]{{2}}|xn--)")
_HOST_CHAR = re.compile(_HOST)
_MENTION = re.compile(rf"[@\uff20\ufe6b]{_EM}{_NAME}")
_HASHTAG = re.compile(rf"[#\uff03\ufe5f]{_EM}(?:{_NAME}|[:-])")  # Discourse slugs may start with : or -
_WORD = re.compile(rf"[^\s|<>{chr(SLOT_BASE)}-\U0010ffff]+")
_LEADING = "([{\"'*_~"
_TRAILING = ".,;:!?)]}\"'*_~"


def find_wraps(display: str) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` for each word of ``display`` to show as code; ``kind`` names the reason."""
    wraps: list[tuple[int, int, str]] = []
    for match in _WORD.finditer(display):
        word = match.group(0)
        kind = _kind(word)
        at = match.start()
        if kind is None and at >= 2 and display[at - 1] == "|" and _HOST_CHAR.match(display, at - 2):
            kind = "url" if _TLD_AFTER_BAR.match(word) else None
        if kind is None:
            continue
        core = word.lstrip(_LEADING)
        start = match.start() + len(word) - len(core)
        core = core.rstrip(_TRAILING)  # never empty: a link-like word has a character outside both sets
        wraps.append((start, start + len(core), kind))
    return wraps


def _kind(word: str) -> str | None:
    if _URL.search(word):
        return "url"
    if _MENTION.search(word):
        return "mention"
    if _HASHTAG.search(word):
        return "hashtag"
    return None
