"""Text normalisation before matching: one canonical, lowercase, accent-free, de-obfuscated form.

The same folding (accents, squeezed letters) is applied to the rules' patterns at load time
(:func:`fold_pattern`), so a rule author writes ``fabriquer``, ``kill`` or ``adresse`` as plain words.

Steps, in order (each undoes one trick used to slip a request past a word list):

1. Unicode NFKC (full-width letters, ligatures, compatibility forms become plain letters).
2. Format characters removed: zero-width spaces and joiners, bidi embeddings/overrides/isolates,
   soft hyphens, BOMs (Unicode category ``Cf``).
3. Case folding, then accent folding (NFD, combining marks dropped) and a few letters NFD leaves
   alone (``œ``, ``æ``, ``ø``, ``ł``, ``đ``); Cyrillic and Greek look-alikes become Latin letters.
4. Typographic apostrophes and dashes mapped to ASCII. Words spelt letter by letter with wider
   gaps between the words (``h o w  t o  m a k e``) become words (``how to make``); then every run
   of whitespace becomes one space.
5. Single letters separated by spaces, dots, dashes, underscores or asterisks re-joined
   (``b o m b``, ``b.o.m.b``, ``b. o. m. b`` → ``bomb``; ``h.o.w t.o`` → ``how to``): one
   separator along a run, three letters at least when it holds a space, so ``a b`` stays as written.
   Words cut by hyphens into short pieces are re-joined (``ex-plo-sif``, ``bo-mb`` → ``explosif``,
   ``bomb``): a piece of one to three letters, never a French pronoun (``dis-moi`` stays).
6. Leetspeak mapped (``0→o 1→i 3→e 4→a 5→s 7→t 8→b @→a $→s €→e !→i |→l``), but only in tokens
   that use them as letters: between two letters (``b0mb``, ``m4ke``) or a symbol first (``$hit``).
   Numbers and identifiers such as ``50``, ``x64``, ``c4`` or ``3d`` are left alone.
7. Runs of the same letter squeezed to one (``boooomb`` → ``bomb``, ``kill`` → ``kil``); Latin
   letters only, which is what folding leaves of any script the rules are written in.
"""

from __future__ import annotations

import re
import unicodedata

import regex

# Hot-path regexes use the stdlib engine (faster on these simple patterns); rules use ``regex``.
_C = r"[\w@$€|!]"
# Single characters split by one repeated separator: three or more with spaces ("b o m b"), two or
# more with dots, dashes, underscores or asterisks ("b.o.m.b", "t.o"). The separator must be the same
# along the run, so "h.o.w t.o" becomes "how to", not "howto".
# (The leading class and the look-ahead let the engine skip every position but one-letter words.)
_SPACED = re.compile(
    rf"{_C}(?<!{_C}{_C})(?=[ ._*\-]{_C}(?![^\W_]|[@$€|!]))"
    rf"(?:(?: {_C}){{2,}}(?![\w@$€|])|(?P<sep>[._*\-]){_C}(?:(?P=sep){_C})*(?![\w@$€|]))"
)
# The same with a separator followed by a space ("b. o. m. b", "m- e- t- h"): three letters at least.
_SPACED_PUNCT = re.compile(rf"(?<![\w@$€|]){_C}(?P<sep>[._*\-] ){_C}(?:(?P=sep){_C})+(?![\w@$€|])")
# Letter-by-letter words with two or more spaces between words: "h o w  t o  m a k e".
# Starts only where a run starts (not after "x "), and never gives back what it took: linear.
# Every spelled letter stands alone (``(?!\S)``), so a plain word one space after the run ends it
# instead of failing the whole run ("r a d i c a l i z e   m y   c o u s i n - what").
# Where a match of ``_SPACED`` can start: one character before a hint, a separator after a single
# ``_C`` that no ``_C`` precedes, then either a single ``_C``, a space and another ``_C`` not
# followed by ``[\w@$€|]`` (after a space), or a single ``_C`` not followed by a letter, a digit or
# a leet symbol (after ``._*-``). Every match has one (its first letter, its first separator, its
# second letter...), so trying ``_SPACED.match`` one character before each hint, in order, finds
# exactly the matches of ``_SPACED.sub``; the hint starts on a separator, which the engine skips to,
# where ``_SPACED`` is tried at every letter. It consumes only the separator, so no hint hides
# another. Likewise ``_SPACED_PUNCT`` needs a separator, a space, one ``_C``, a separator and a space.
# (The separator is matched first, by one class, then told apart by a look-behind: a pattern that starts
# with a class lets the engine skip every other character, where one that starts with an alternation
# of a literal and a class is tried at every position.)
_SPACED_HINT = re.compile(
    rf"[ ._*\-](?:(?<= )(?={_C} {_C}(?![\w@$€|]))|(?<=[._*\-])(?={_C}(?![^\W_]|[@$€|!])))"
    rf"(?<=(?<![\w@$€|!]){_C}[ ._*\-])"
)
_SPACED_PUNCT_HINT = re.compile(rf"[._*\-] {_C}[._*\-] ")
_WIDE_SPELLED = re.compile(r"(?<!\S)(?<!\S )\S(?: \S(?!\S))++(?: {2,}+\S(?!\S)(?: \S(?!\S))*+)++(?!\S)")
_WIDE_GAP = re.compile(r" {2,}")
# A word cut into pieces by single hyphens, one piece short ("ex-plo-sif", "pi-pe", "bo-mb"). Every
# match starts where the run of letters before one of its hyphens starts, and that hyphen stands
# between two letters: the hint finds those hyphens (a rare character the engine skips to), and the
# pattern is tried only at the start of the letters before each, where ``sub`` tries it at every word.
_HYPHENATED = re.compile(r"\b[a-z]+(?:-[a-z]+)+\b")
_HYPHENATED_HINT = re.compile(r"-(?<=[a-z]-)(?=[a-z])")
# French pronouns and articles after a hyphen ("dis-moi", "mot-de-passe"): those words stay as written.
_KEEP_HYPHEN = frozenset(
    {
        "moi",
        "toi",
        "lui",
        "nous",
        "vous",
        "les",
        "le",
        "la",
        "leur",
        "leurs",
        "en",
        "y",
        "ce",
        "il",
        "elle",
        "elles",
        "ils",
        "on",
        "t",
        "je",
        "tu",
        "ci",
        "de",
        "du",
        "des",
        "au",
        "aux",
        "et",
        "a",
        "l",
        "d",
    }
)
_SEPARATORS = re.compile(r"[ ._*\-]")
# A token that uses leet symbols as letters: a digit or symbol between two letters ("b0mb", "m4ke"),
# or a symbol before a letter at its start ("$tupid"). "c4", "x64", "3d" or "50" do not qualify.
# A leet core: symbols between two letters, or a symbol opening a word before a letter. Written to
# start on the symbol (a rare character the engine can skip to) and look back for the letter.
_LEET_CORE = re.compile(r"[0-9@$€|!](?:(?<=[a-z].)[0-9@$€|!]*[a-z]|(?<=[@$€])(?<![\w@$€|!].)[a-z])")
_LEET_TOKEN = re.compile(r"[\w@$€|!]*[\w@$€]")
# A word's characters, matched on the reversed text from a leet core back to the word's start.
_TOKEN_RUN = re.compile(r"[\w@$€|!]*+")
_EDGE_LEET = re.compile(r"\b(?=[a-z]*[0-9])(?=[0-9]*[a-z])[a-z0-9]+\b")
# The same words from their first digit on (what translating changes: leet maps no letter), a
# match starting on a digit (a rarer character the engine skips to) and looking back over its letters
# for the word's start; ``regex`` for the look-behind of any width. Its ``\w`` is ``re``'s where the
# two engines agree on every non-ASCII character of the text (``same_words``), the only texts it runs on.
_EDGE_LEET_DIGITS = regex.compile(
    r"[0-9](?<=(?<!\w)[a-z]*+[0-9])(?:(?<=[a-z][0-9])[a-z0-9]*+|[0-9]*+[a-z][a-z0-9]*+)(?!\w)"
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# After folding, letters are ASCII but for scripts with no Latin look-alike (left as they are).
# A letter the same letter follows: deleting each leaves one of every run. The replacement is a plain
# (empty) string, which the engine substitutes without a Python call per match.
_REPEATS = re.compile(r"([a-z])(?=\1)")
# In a pattern: escapes (kept whole, so "\\bb" and "\\N{SMALL}" survive) or a run of one letter.
_PATTERN_REPEATS = re.compile(r"\\[pPN]\{[^}]*\}|\\.|([^\W\d_])\1+")
_CACHE_LIMIT = 20_000

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
        # Typography.
        "’": "'",
        "‘": "'",
        "ʼ": "'",
        "´": "'",
        "‐": "-",
        "‑": "-",
        "‒": "-",
        "–": "-",
        "—": "-",
    }
)
# Cyrillic and Greek letters that look like Latin ones, looked up before case folding (an upper-case
# Greek "Ν" looks like "N", its lower case "ν" like "v").
_LOOKALIKES = dict(
    zip(
        "АВЕКМНОРСТУХІЈЅаеорсухкмтнвіјѕΑΒΕΖΗΙΚΜΝΟΡΤΥΧαεικνορτυχ",
        "abekmhopctyxijsaeopcyxkmthbijsabezhikmnoptyxaeikvoptux",
        strict=True,
    )
)
_LEET = str.maketrans(
    {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "8": "b", "@": "a", "$": "s", "€": "e"}
    | {"!": "i", "|": "l"}
)


def _fold_char(char: str) -> str:
    """One character case-folded, without accents or format controls, look-alikes made Latin."""
    if unicodedata.category(char) == "Cf":
        return ""
    if char in _LOOKALIKES:
        return _LOOKALIKES[char]
    decomposed = unicodedata.normalize("NFD", char.casefold())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").translate(_LETTERS)


class _FoldTable(dict[int, str]):
    """``str.translate`` table filled on first sight of each character (bounded), so folding a
    question is one C-level pass instead of NFD + a regex per call."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __missing__(self, code: int) -> str:
        folded = _fold_char(chr(code))
        if len(self) < self.limit:
            self[code] = folded
        return folded


_FOLD = _FoldTable(_CACHE_LIMIT)


def fold(text: str) -> str:
    """Steps 1-4: NFKC, format characters removed, case and accents folded, spaces collapsed."""
    text = unicodedata.normalize("NFKC", text)
    if not text.isascii():
        text = _fold_non_ascii(text)
    text = text.lower()
    if "  " in text:
        text = _WIDE_SPELLED.sub(_wide_words, text)
    return " ".join(text.split())


def _fold_non_ascii(text: str) -> str:
    """The non-ASCII characters through the (Python-level) table; lower() does the rest. Each
    distinct character that folds to something else is replaced throughout (``str.replace``, one
    C-level pass per character, where a post holds few distinct ones), unless what one folds to holds
    another of them (replacing in turn would then fold it twice): then the runs are translated."""
    changed: dict[str, str] = {}
    for char in set(_NON_ASCII_CHAR.findall(text)):
        folded = _FOLD[ord(char)]
        if folded != char:
            changed[char] = folded
    if any(not f.isascii() and not changed.keys().isdisjoint(f) for f in changed.values()):
        return _NON_ASCII.sub(lambda m: m.group().translate(_FOLD), text)
    for char, folded in changed.items():
        text = text.replace(char, folded)
    return text


def _wide_words(match: re.Match[str]) -> str:
    return " ".join(word.replace(" ", "") for word in _WIDE_GAP.split(match.group()))


def _join_spaced(text: str) -> str:
    """``_SPACED.sub`` (single letters split by one separator re-joined), trying the pattern only one
    character before each ``_SPACED_HINT``."""
    parts: list[str] = []
    done = 0
    for hint in _SPACED_HINT.finditer(text):
        at = hint.start() - 1
        if at < done:
            continue
        match = _SPACED.match(text, at)
        if match is not None:
            parts.append(text[done:at])
            parts.append(_SEPARATORS.sub("", match.group()))
            done = match.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _join_hyphenated(text: str) -> str:
    """``_HYPHENATED.sub(_join_pieces, text)``, trying the pattern only where the letters before a
    hyphen between two letters start."""
    parts: list[str] = []
    done = 0
    for hint in _HYPHENATED_HINT.finditer(text):
        at = hint.start() - 1
        while at > done and "a" <= text[at - 1] <= "z":
            at -= 1
        if at < done:
            continue
        match = _HYPHENATED.match(text, at)
        if match is not None:
            parts.append(text[done:at])
            parts.append(_join_pieces(match))
            done = match.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _join_pieces(match: re.Match[str]) -> str:
    pieces = match.group().split("-")
    if any(p in _KEEP_HYPHEN for p in pieces) or all(len(p) > 3 for p in pieces):
        return match.group()
    return "".join(pieces)


def _unleet(text: str) -> str:
    """Map leet symbols in every word that holds a leet core (see ``_LEET_CORE``)."""
    parts: list[str] = []
    done = 0
    size = len(text)
    backwards = ""
    for core in _LEET_CORE.finditer(text):
        if core.start() < done:
            continue
        # Back to the word's start (not before ``done``): the word's characters before the core, read
        # on the reversed text (one anchored match instead of a step per character).
        backwards = backwards or text[::-1]
        run = _TOKEN_RUN.match(backwards, size - core.start(), size - done)
        start = core.start() if run is None else size - run.end()  # never None: the run may be empty
        # The word runs on to its last letter, digit or symbol (never None: the core is a word part).
        end = (_LEET_TOKEN.match(text, start) or core).end()
        parts.append(text[done:start])
        parts.append(text[start:end].translate(_LEET))
        done = end
    parts.append(text[done:])
    if len(parts) < 5:  # fewer than two leet words: "t0", "x64" or "c4" stay as written
        return "".join(parts)
    # A question written in leet (two leet words at least): a digit at either end of a word that
    # also holds a letter is a letter too ("h0w t0", "0n", "4nd", "1d"). Numbers stay.
    text = "".join(parts)
    if text.isascii() or same_words(text):
        return _EDGE_LEET_DIGITS.sub(_leet_word, text)
    return _EDGE_LEET.sub(_leet_word, text)


def _leet_word(match: re.Match[str] | regex.Match[str]) -> str:
    return match.group().translate(_LEET)


_NON_ASCII_CHAR = re.compile(r"[^\x00-\x7f]")
_RE_WORD = re.compile(r"\w")
_REGEX_WORD = regex.compile(r"\w")
_AGREE: dict[str, bool] = {}
_AGREE_LIMIT = 20_000


def same_words(text: str) -> bool:
    """Whether ``re`` and ``regex`` read the same words in ``text``: each of its non-ASCII characters
    is a word character for both engines or for neither (cached per character, bounded)."""
    for char in set(_NON_ASCII_CHAR.findall(text)):
        same = _AGREE.get(char)
        if same is None:
            same = (_RE_WORD.match(char) is None) == (_REGEX_WORD.match(char) is None)
            if len(_AGREE) < _AGREE_LIMIT:
                _AGREE[char] = same
        if not same:
            return False
    return True


def normalize(text: str) -> str:
    """The canonical form the rules are matched against (all seven steps of the module docstring)."""
    text = fold(text)
    if _SPACED_PUNCT_HINT.search(text):
        text = _SPACED_PUNCT.sub(lambda m: _SEPARATORS.sub("", m.group()), text)
    text = _join_spaced(text)
    if "-" in text:
        text = _join_hyphenated(text)
    return _REPEATS.sub("", _unleet(text))


def fold_pattern(pattern: str) -> str:
    """Fold a rule pattern like the text: accents removed and repeated letters squeezed.

    Escapes are left whole: ``\\bb`` is ``\\b`` then ``b``, and names in ``\\N{...}`` or
    ``\\p{...}`` keep their letters. Case is left alone: ``\\B`` and ``\\b`` differ; rules are validated
    to be lowercase instead.
    """
    if not pattern.isascii():
        pattern = "".join(_FOLD[ord(c)] if c.isalpha() and not c.isascii() else c for c in pattern)
    return _PATTERN_REPEATS.sub(lambda m: m.group(1) or m.group(), pattern)
