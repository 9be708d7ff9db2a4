"""Quoting untrusted text (forum posts, the question) so it stays data inside the prompt.

Every quoted block sits between an opening and a closing line that carry a per-prompt random token,
``<<<SOURCE [[1]] id=3f9a0c2e>>>`` … ``<<<END SOURCE [[1]] id=3f9a0c2e>>>``. Forum text cannot close a
block it does not know the token of, and on top of that :func:`neutralise` rewrites, inside the text:

- runs of three or more ``<`` or ``>`` (the fence sequence) into ``‹``/``›``, so no line of forum text
  can even look like a fence;
- ``[[`` and ``]]`` (and look-alikes: full-width brackets, ``⟦ ⟧``, ``〚 〛``) into ``[ [`` / ``] ]``, so a
  post cannot forge a citation marker that the LLM would copy and the sanitizer would turn into a link;
- control characters, zero-width characters and bidirectional overrides (removed), so an RTL trick
  cannot hide text from a moderator reading the trace.
"""

from __future__ import annotations

import re
import secrets

import regex

_INVISIBLE = regex.compile(r"[\p{Cc}\p{Cf}--[\n\t]]", flags=regex.V1)
_LOOKALIKE = str.maketrans({"［": "[", "］": "]", "⟦": "[", "⟧": "]", "〚": "[", "〛": "]"})
_FENCE_OPEN = re.compile(r"<{3,}")
_FENCE_CLOSE = re.compile(r">{3,}")
_SPACES = re.compile(r"\s+")


def new_token() -> str:
    """A fresh fence token: 8 random hex digits, unguessable by the author of a forum post."""
    return secrets.token_hex(4)


def neutralise(text: str) -> str:
    """Make forum text safe to quote: no fence sequence, no citation marker, no invisible characters."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _INVISIBLE.sub("", text).translate(_LOOKALIKE)
    text = _FENCE_OPEN.sub(lambda m: "‹" * len(m.group()), text)
    text = _FENCE_CLOSE.sub(lambda m: "›" * len(m.group()), text)
    while "[[" in text or "]]" in text:
        text = text.replace("[[", "[ [").replace("]]", "] ]")
    return text


def one_line(text: str) -> str:
    """Neutralised text on a single line (titles, names): a title cannot start a line of its own."""
    return _SPACES.sub(" ", neutralise(text)).strip()


def block(kind: str, token: str, body: str, *, label: str = "") -> str:
    """A fenced block; ``body`` must already be neutralised."""
    head = f"{kind} {label} id={token}" if label else f"{kind} id={token}"
    return f"<<<{head}>>>\n{body}\n<<<END {head}>>>"
