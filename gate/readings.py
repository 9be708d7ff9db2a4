"""Extra readings of a question: the same words with what a reader undoes at a glance undone.

:func:`gate.normalize.normalize` gives the one canonical form every rule reads (zero-width characters
and bidi controls removed, letters spelt apart re-joined, leetspeak mapped...). Some tricks cannot be
undone in that one form without changing ordinary questions, so they are read *beside* it: each
reading below is judged like the question itself (:meth:`gate.Gate.check`), and a hit on any reading
decides. A reading is made only when its trick is there, so an ordinary question has none or one:

- ``entities``: HTML character references decoded (``&#98;&#111;`` or ``&lt;``);
- ``bidi``: the characters after a right-to-left override (U+202E) reversed, as they are displayed;
- ``upside-down``: letters turned upside down (``ʍoɥ``) turned back, the text read from its end;
- ``symbols``: symbols and emoji between letters dropped (``b💣o💣m💣b``, ``b♥o♥m♥b``), and single
  letters joined by one repeated mark the normaliser does not take (``b/o/m/b``, ``b+o+m+b``);
- ``reversed`` / ``reversed-words``: the text, or each word, read backwards, when that holds more
  common English or French words than the text as written;
- ``rot13``: the letters rotated by 13, on the same evidence;
- ``comments``: the text of code and HTML comments on its own (``<!-- -->``, ``/* */``, ``// ...``,
  ``# ...``), so that a request in a comment is not excused by the code around it;
- ``clauses``: a two-step or "in theory" ask cut at its steps (``then``, ``ensuite``, ``step 2``,
  ``in theory``...), each step a sentence of its own, so that an excuse in one step does not clear
  the other;
- ``phonetic``: French written as it sounds mapped to its spelling (``comen`` → ``comment``,
  ``sa`` → ``ça``, ``ke`` → ``que``, ``jveux`` → ``je veux``), applied to the question and to its
  comments.

Bounded: at most :data:`MAX_READINGS` readings of the first :data:`READ_CHARS` characters; every
pattern here is linear (no nested quantifiers over the same characters) or a ``str.find`` loop.
Stdlib only.
"""

from __future__ import annotations

import codecs
import html
import re
import unicodedata

from gate.language import language_of

MAX_READINGS = 8
READ_CHARS = 2000
"""Readings are made from the question's first ``READ_CHARS`` characters (the question as written is
judged up to the gate's ``max_chars``): a request hidden by a trick sits where the question is."""

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z][a-zA-Z0-9]{1,31});?")
_RLO = "\u202e"
# What closes an override's span: pop directional formatting, pop isolate, another override, a line.
_RLO_END = re.compile("[\u202c\u2069\u202d\n]")

_FLIPPED = {
    "ɐ": "a",
    "ɔ": "c",
    "ǝ": "e",
    "ə": "e",
    "ɟ": "f",
    "ƃ": "g",
    "ɓ": "g",
    "ɥ": "h",
    "ᴉ": "i",
    "ı": "i",
    "ɾ": "j",
    "ʞ": "k",
    "ʃ": "l",
    "ɯ": "m",
    "ɹ": "r",
    "ʇ": "t",
    "ʌ": "v",
    "ʍ": "w",
    "ʎ": "y",
    "¿": "?",
    "¡": "!",
    "˙": ".",
    "⅋": "&",
    "„": '"',
    "Ɐ": "a",
    "Ɔ": "c",
    "Ǝ": "e",
    "Ⅎ": "f",
    "⅁": "g",
    "Ɥ": "h",
    "ſ": "j",
    "Ʞ": "k",
    "˥": "l",
    "Ԁ": "p",
    "Ꝺ": "d",
    "ᴚ": "r",
    "⊥": "t",
    "∩": "u",
    "Λ": "v",
    "M": "w",
    "⅄": "y",
}
# The letters that only flipped text uses (the evidence), and the plain letters a flip swaps.
_FLIP_ONLY = frozenset("ɐɔǝəɟƃɓɥᴉɾʞʃɯɹʇʌʍʎⱯƆƎℲ⅁ꞍꞰ˥Ԁᴚ⊥∩⅄")
_FLIP_CHARS = re.compile("[" + "".join(sorted(_FLIP_ONLY)) + "]")
_FLIP_TABLE = str.maketrans({**_FLIPPED, "b": "q", "q": "b", "d": "p", "p": "d", "n": "u", "u": "n"})

# Marks the normaliser does not take as letter separators (it joins letters split by spaces, dots,
# dashes, underscores and asterisks): one of them repeated between single letters, three at least.
_MARKED = re.compile(
    r"(?<![^\W\d_])[^\W\d_](?P<m>[/+~^=:,;|\\#'\"`<>])[^\W\d_](?:(?P=m)[^\W\d_])+(?![^\W\d_])"
)
# Where a symbol may be (a quick test before the per-character look-up): Latin-1 signs, the symbol
# and arrow blocks, dingbats, variation selectors, private use, emoji and pictographs.
_SYMBOL = re.compile(
    "[\u00a6-\u00b4\u00b8\u02c2-\u02ff\u2100-\u2bff\u3200-\u33ff\ue000-\uf8ff\ufe00-\ufe0f\U0001f000-\U0001faff]"
)
_MARKED_HINT = re.compile(r"(?P<m>[/+~^=:,;|\\#'\"`<>])[^\W\d_](?P=m)")
_MARKS = re.compile(r"[/+~^=:,;|\\#'\"`<>]")

# Common words of both languages that are not palindromes ("a", "non", "elle" read the same both ways).
_COMMON_WORDS = (
    "the to how do can what is are you i'm my me of in for and with make get who where why this that "
    "it's would could should does tell give need want someone your his her there they them know "
    "comment faire est les des une pour que qui quoi avec dans pas mon ton son mes tes ses je tu "
    "il on nous vous ils pourquoi quel quelle peut veux fabriquer"
)
_COMMON = frozenset(_COMMON_WORDS.split())
_COMMON_REVERSED = frozenset(word[::-1] for word in _COMMON)
_COMMON_ROT13 = frozenset(codecs.encode(word, "rot13") for word in _COMMON)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")

# Comments: a line comment starts at "//" (not a URL's "://") or at a "#" that opens the line or
# follows a space, and a space follows it ("#include", "C#" and "#42" are not comments).
# (Each starts on its literal, a character the engine skips to; what precedes it is checked after.)
# Each starts where its run of "/" or "#" starts (a scan inside a run fails at once: linear).
_SLASH_COMMENT = re.compile(r"(?<!/)//++([^\n]*)")
_HASH_COMMENT = re.compile(r"(?<!#)#++[ \t]++([^\n]*)")
_BLOCKS = (("<!--", "-->"), ("/*", "*/"))

# Where a two-step or hedged ask has its steps: the marker becomes a sentence break.
_ASK = (
    r"(?:how|what|where|which|tell|explain|give|list|describe|write|show|help|teach|i (?:need|want)|"
    r"can you|could you|would you|comment|quel|quelle|o[uù]|combien|explique|dis|donne|[ée]cris|montre|"
    r"aide|apprends|je (?:veux|voudrais))\b"
)
# Narrative markers ("then", "puis") count only before an ask ("and then disputed them all" is a
# story); numbered steps and hedges ("step 2", "in theory") always.
_STEPS = re.compile(
    r"(?i)(?:,\s*|\b)(?:"
    r"(?:and then|then|after that|afterwards|next|and also|also|et ensuite|ensuite|et puis|puis|"
    r"apr[eè]s [cç]a|et aussi)\b[,:]?(?=\s*" + _ASK + r")"
    r"|(?:second(?:ly)?|step (?:2|two|3|three)|part (?:2|two)|in theory|theoretically|hypothetically|"
    r"in principle|purely (?:academically|hypothetically)|deuxi[eè]mement|deuxi[eè]me question|"
    r"[ée]tape (?:2|deux|3|trois)|en th[ée]orie|th[ée]oriquement|hypoth[ée]tiquement)\b[,:]?"
    r"|,\s*(?:and|et)\s+(?=(?:how|tell|explain|give|list|describe|comment|explique|dis|donne)\b))"
)

# A word each marker of ``_STEPS`` holds (the ", and how" form aside).
_STEP_WORDS_TEXT = (
    "then after afterwards next second secondly step part also theory theoretically hypothetically "
    "principle purely ensuite puis après apres deuxièmement deuxiemement deuxième deuxieme étape "
    "etape aussi théorie theorie théoriquement theoriquement hypothétiquement hypothetiquement "
    ""
)
_STEP_WORDS = frozenset(_STEP_WORDS_TEXT.split())

# French written as it sounds: a word as typed -> its spelling (the words after folding the case).
_PHONETIC = {
    "comen": "comment",
    "coment": "comment",
    "commen": "comment",
    "comman": "comment",
    "koman": "comment",
    "komen": "comment",
    "komment": "comment",
    "kom": "comme",
    "sa": "ça",
    "ke": "que",
    "kel": "quel",
    "kelle": "quelle",
    "kels": "quels",
    "koi": "quoi",
    "kwa": "quoi",
    "ki": "qui",
    "kan": "quand",
    "kand": "quand",
    "pk": "pourquoi",
    "pq": "pourquoi",
    "pkoi": "pourquoi",
    "pourkoi": "pourquoi",
    "jveux": "je veux",
    "jveu": "je veux",
    "jpeux": "je peux",
    "jpeu": "je peux",
    "jsais": "je sais",
    "jsp": "je sais pas",
    "jvais": "je vais",
    "jfais": "je fais",
    "chui": "je suis",
    "chuis": "je suis",
    "jsuis": "je suis",
    "jai": "j'ai",
    "cé": "c'est",
    "sé": "c'est",
    "ct": "c'était",
    "fo": "faut",
    "fau": "faut",
    "fodrait": "faudrait",
    "faudré": "faudrait",
    "fer": "faire",
    "fair": "faire",
    "fé": "fait",
    "mé": "mais",
    "pa": "pas",
    "ya": "il y a",
    "qqn": "quelqu'un",
    "qqun": "quelqu'un",
    "kelkun": "quelqu'un",
    "kelk1": "quelqu'un",
    "qq": "quelques",
    "bcp": "beaucoup",
    "dc": "donc",
    "ds": "dans",
    "pr": "pour",
    "tt": "tout",
    "mm": "même",
    "oci": "aussi",
    "osi": "aussi",
    "vrmt": "vraiment",
    "stp": "s'il te plaît",
    "svp": "s'il vous plaît",
    "tkt": "t'inquiète",
    "mtn": "maintenant",
    "jcherche": "je cherche",
    "mtuer": "me tuer",
}
# Spellings no English word has: one of them marks a question as French written as it sounds.
_NOT_MARKS = {"sa", "pa", "pr", "tt", "ds", "mm", "fer", "fair", "kom", "kan", "ya", "ke"}
_FRENCH_SPELLING = frozenset(_PHONETIC) - _NOT_MARKS - {"ki", "fo", "dc", "qq"}
_PHONETIC_WORD = re.compile(r"[^\W\d_]+")
# A word spelt with "k" for "qu" ("fabrik", "fabriké", "explik", "kestion"), or "j" glued to a verb.
_K_END = re.compile(r"^(?P<stem>[^\W\d_]{3,})ik(?P<end>é|er|e|es|ent)?$")
_K_START = re.compile(r"^k(?=[aeiouyéè][^\W\d_]{2,}$)")
# A word one of the spelling rules below may change (a quick test).
_SOUNDS = re.compile(r"k[aeiouyéè][^\W\d_]{2}|j[bcdfgklmnpqrstvz][^\W\d_]{2}")
_J_VERB = re.compile(r"^j(?=[bcdfgklmnpqrstvz][^\W\d_]{2,}$)")


def readings(text: str) -> list[tuple[str, str]]:
    """The extra readings of ``text``'s first ``READ_CHARS`` characters (name, text), in the order
    above, at most ``MAX_READINGS``; none for most questions."""
    text = text[:READ_CHARS]
    out: list[tuple[str, str]] = []
    seen = {text}

    def add(name: str, reading: str | None) -> None:
        if reading is not None and reading not in seen and len(out) < MAX_READINGS:
            seen.add(reading)
            out.append((name, reading))

    add("entities", _entities(text))
    add("bidi", _bidi(text))
    add("upside-down", _upside_down(text))
    add("symbols", _symbols(text))
    words = _WORD.findall(text.lower())
    forwards = sum(word in _COMMON for word in words)
    if _more(words, _COMMON_REVERSED, forwards):
        add("reversed", text[::-1])
        add("reversed-words", _reverse_words(text))
    if _more(words, _COMMON_ROT13, forwards):
        add("rot13", codecs.encode(text, "rot13"))
    comments = _comments(text)
    add("comments", comments)
    add("clauses", _clauses(text, words))
    add("phonetic", _phonetic(text, set(words)))
    if comments is not None:
        add("phonetic", _phonetic(comments))
    return out


def _entities(text: str) -> str | None:
    if "&" not in text or _ENTITY.search(text) is None:
        return None
    return html.unescape(text)


def _bidi(text: str) -> str | None:
    if _RLO not in text:
        return None
    parts: list[str] = []
    at = 0
    while (start := text.find(_RLO, at)) != -1:
        parts.append(text[at:start])
        end_match = _RLO_END.search(text, start + 1)
        end = len(text) if end_match is None else end_match.start()
        parts.append(text[start + 1 : end][::-1])
        at = end + 1 if text[end : end + 1] in ("\u202c", "\u2069") else end
    parts.append(text[at:])
    return "".join(parts)


def _upside_down(text: str) -> str | None:
    if text.isascii() or len(_FLIP_CHARS.findall(text)) < 2:
        return None
    return text.translate(_FLIP_TABLE)[::-1]


def _symbols(text: str) -> str | None:
    changed = text
    if not text.isascii() and _SYMBOL.search(text) is not None:
        changed = "".join(c for c in text if not _is_symbol(c))
    if _MARKED_HINT.search(changed) is not None:
        changed = _MARKED.sub(lambda m: _MARKS.sub("", m.group()), changed)
    return changed if changed != text else None


def _is_symbol(char: str) -> bool:
    """Emoji, pictographs and other symbols, variation selectors and skin tones: never letters."""
    category = unicodedata.category(char)
    return category in {"So", "Sk", "Co", "Cs"} or (category == "Mn" and "\ufe00" <= char <= "\ufe0f")


def _more(words: list[str], common: frozenset[str], forwards: int) -> bool:
    """Whether the words, transformed, hold two common words at least and more than as written
    (``common``: the common words transformed back, so the text itself is never transformed)."""
    found = sum(word in common for word in words)
    return found >= 2 and found > forwards


def _reverse_words(text: str) -> str:
    return _PHONETIC_WORD.sub(lambda m: m.group()[::-1], text)


def _comments(text: str) -> str | None:
    found: list[str] = []
    for opening, closing in _BLOCKS:
        at = 0
        while (start := text.find(opening, at)) != -1:
            end = text.find(closing, start + len(opening))
            stop = len(text) if end == -1 else end
            found.append(text[start + len(opening) : stop])
            at = stop + len(closing)
    if "//" in text:
        for match in _SLASH_COMMENT.finditer(text):
            if text[match.start() - 1 : match.start()] not in (":", "/"):
                found.append(match.group(1))
    if "#" in text:
        for match in _HASH_COMMENT.finditer(text):
            if match.start() == 0 or text[match.start() - 1].isspace():
                found.append(match.group(1))
    kept = [" ".join(c.replace("*", " ").split()) for c in found]
    kept = [c for c in kept if c]
    return ". ".join(kept) if kept else None


def _clauses(text: str, words: list[str]) -> str | None:
    if _STEP_WORDS.isdisjoint(words) and not (", and " in text or ", et " in text or ",and " in text):
        return None  # no marker can match (a quick test before the scan)
    if _STEPS.search(text) is None:
        return None
    return _STEPS.sub(".", text)


def _phonetic(text: str, words: set[str] | None = None) -> str | None:
    """The French words spelt out, for a question that reads as French (English words such as
    "keeps" or "ke" are left alone). ``words``: the lowercase words of ``text`` when known."""
    if words is None:
        words = set(_WORD.findall(text.lower()))
    if words.isdisjoint(_PHONETIC) and not any(_SOUNDS.match(w) or w.endswith("ik") for w in words):
        return None
    if _FRENCH_SPELLING.isdisjoint(words) and language_of(words, text) != "fr":
        return None
    changed = False

    def spell(match: re.Match[str]) -> str:
        nonlocal changed
        word = match.group()
        low = word.lower()
        spelt = _PHONETIC.get(low)
        if spelt is None:
            spelt = _K_END.sub(lambda m: m.group("stem") + _K_ENDS.get(m.group("end") or "", "ique"), low)
            spelt = _K_START.sub("qu", spelt)
            spelt = _J_VERB.sub("je ", spelt)
        if spelt != low:
            changed = True
            return spelt
        return word

    spelt_text = _PHONETIC_WORD.sub(spell, text)
    return spelt_text if changed else None


_K_ENDS = {"": "ique", "e": "ique", "es": "iques", "ent": "iquent", "é": "iquer", "er": "iquer"}
