"""Text normalisation before matching: one canonical, lowercase, accent-free, de-obfuscated form.

The same folding (accents, squeezed letters) is applied to the rules' patterns at load time
(:func:`fold_pattern`), so a rule author writes ``fabriquer``, ``kill`` or ``adresse`` as plain words.

Steps, in order (each undoes one trick used to slip a request past a word list):

1. Unicode NFKC (full-width letters, ligatures, compatibility forms become plain letters).
2. Format characters removed: zero-width spaces and joiners, bidi embeddings/overrides/isolates,
   soft hyphens, BOMs (Unicode category ``Cf``).
3. Case folding, then accent folding (NFD, combining marks dropped) and a few letters NFD leaves
   alone (``œ``, ``æ``, ``ø``, ``ł``, ``đ``) and common Cyrillic/Greek look-alikes of Latin letters.
4. Typographic apostrophes and dashes mapped to ASCII; every run of whitespace becomes one space.
5. Single letters separated by spaces, dots, dashes, underscores or asterisks re-joined
   (``b o m b``, ``b.o.m.b`` → ``bomb``; ``h.o.w t.o`` → ``how to``): one separator along a run,
   three letters at least when it is a space, so ``a b`` stays as written.
6. Leetspeak mapped (``0→o 1→i 3→e 4→a 5→s 7→t 8→b @→a $→s €→e !→i |→l``), but only in tokens
   that use them as letters: between two letters (``b0mb``, ``m4ke``) or a symbol first (``$hit``).
   Numbers and identifiers such as ``50``, ``x64``, ``c4`` or ``3d`` are left alone.
7. Runs of the same letter squeezed to one (``boooomb`` → ``bomb``, ``kill`` → ``kil``).
"""

from __future__ import annotations

import unicodedata

import regex

_FORMAT = regex.compile(r"\p{Cf}+")
_MARKS = regex.compile(r"\p{Mn}+")
_SPACES = regex.compile(r"\s+")
# Single characters split by one repeated separator: three or more with spaces ("b o m b"), two or
# more with dots, dashes, underscores or asterisks ("b.o.m.b", "t.o"). The separator must be the same
# along the run, so "h.o.w t.o" becomes "how to", not "howto".
_C = r"[\w@$€|!]"
_SPACED = regex.compile(
    rf"(?<!{_C}){_C}(?: {_C}){{2,}}(?![\w@$€|])"
    rf"|(?<!{_C}){_C}(?P<sep>[._*\-]){_C}(?:(?P=sep){_C})*(?![\w@$€|])"
)
_SEPARATORS = regex.compile(r"[ ._*\-]")
# A token that uses leet symbols as letters: a digit or symbol between two letters ("b0mb", "m4ke"),
# or a symbol before a letter at its start ("$tupid"). "c4", "x64", "3d" or "50" do not qualify.
_LEET_TOKEN = regex.compile(
    r"(?<![\w@$€|!])(?=[\w@$€|!]*?[^\W\d_][\d@$€|!]+[^\W\d_]|[@$€][^\W\d_])[\w@$€|!]*[\w@$€]"
)
_REPEATS = regex.compile(r"([^\W\d_])\1+")
_PATTERN_REPEATS = regex.compile(r"(?<!\\)([^\W\d_])\1+")

_LETTERS = str.maketrans(
    {
        "œ": "oe",
        "æ": "ae",
        "ø": "o",
        "ł": "l",
        "đ": "d",
        "ð": "d",
        "þ": "th",
        "ı": "i",
        # Cyrillic and Greek letters that look like Latin ones (after case folding).
        "а": "a",
        "в": "b",
        "е": "e",
        "к": "k",
        "м": "m",
        "н": "h",
        "о": "o",
        "р": "p",
        "с": "c",
        "т": "t",
        "у": "y",
        "х": "x",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "α": "a",
        "ε": "e",
        "ι": "i",
        "κ": "k",
        "ν": "v",
        "ο": "o",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        # Typography.
        "’": "'",
        "‘": "'",
        "ʼ": "'",
        "`": "'",
        "´": "'",
        "‐": "-",
        "‑": "-",
        "‒": "-",
        "–": "-",
        "—": "-",
    }
)
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "@": "a", "$": "s", "€": "e"}
    | {"!": "i", "|": "l"}
)


def fold(text: str) -> str:
    """Steps 1-4: NFKC, format characters removed, case and accents folded, spaces collapsed."""
    text = unicodedata.normalize("NFKC", text)
    text = _FORMAT.sub("", text).casefold()
    if not text.isascii():
        text = _MARKS.sub("", unicodedata.normalize("NFD", text)).translate(_LETTERS)
    return _SPACES.sub(" ", text).strip()


def normalize(text: str) -> str:
    """The canonical form the rules are matched against (all seven steps of the module docstring)."""
    text = fold(text)
    text = _SPACED.sub(lambda m: _SEPARATORS.sub("", m.group()), text)
    text = _LEET_TOKEN.sub(lambda m: m.group().translate(_LEET), text)
    return _REPEATS.sub(r"\1", text)


def fold_pattern(pattern: str) -> str:
    """Fold a rule pattern like the text: accents removed and repeated letters squeezed.

    A letter right after a backslash is an escape (``\\bb`` is ``\\b`` then ``b``) and is not
    squeezed into the next one. Case is left alone: ``\\B`` and ``\\b`` differ; rules are validated
    to be lowercase instead.
    """
    pattern = _MARKS.sub("", unicodedata.normalize("NFD", pattern)).translate(_LETTERS)
    return _PATTERN_REPEATS.sub(r"\1", pattern)
