"""French or English: enough to answer a refused question in its own language.

Deterministic and cheap: French accented letters in the original text and French function words
count for French, English function words for English; ties go to English (the forum's usual
language). Works on the normalised text (accents folded, doubled letters squeezed); the word lists
are squeezed the same way when the module loads.
"""

from __future__ import annotations

import re

import regex

from gate.normalize import normalize

_WORD = regex.compile(r"\w+")
_SQUEEZE = regex.compile(r"(.)\1+")


def _words(text: str) -> frozenset[str]:
    """A word list, squeezed like normalised text ("elle" -> "ele")."""
    return frozenset(_SQUEEZE.sub(r"\1", word) for word in text.split())


# ``re``: a class of literal characters, the same matches as ``regex`` gives, and a faster scan.
_FR_ACCENTS = re.compile(r"[éèêëàâçùûîïôœÉÈÊÀÂÇÙÛÎÔ]")
_FR_WORDS = _words(
    "le la les un une des du de au aux et est sont je tu il elle nous vous ils elles mon ma mes ton ta "
    "tes son sa ses ce cette ces qui que quoi quel quelle quels quelles pourquoi ou dans pour par "
    "avec sans sur pas ne plus mais donc car moi toi lui leur leurs votre vos notre nos suis es etes "
    "fait faire peut peux veux voudrais comment "
    "oublie affiche ecris donne dis montre explique"
)
_EN_WORDS = _words(
    "the a an and is are was were i you he she it we they my your his her its our their this that "
    "these those what which who how why where when in on of for with without to from by not no but "
    "so do does did can could would should will have has had me him them there here be been any all "
    "some give show tell write make"
)


def detect_language(text: str, original: str | None = None) -> str:
    """``"fr"`` or ``"en"`` for a question.

    ``detect_language(question)`` takes the question as written; ``detect_language(normalized,
    question)`` saves the normalisation when the caller already has :func:`gate.normalize.normalize`
    output.
    """
    if original is None:
        original, text = text, normalize(text)
    return language_of(set(_WORD.findall(text)), original)


def language_of(words: set[str], original: str = "") -> str:
    """``"fr"`` or ``"en"`` from the set of distinct normalised words (and the original's accents)."""
    fr = len(words & _FR_WORDS)
    if not original.isascii():
        fr += len(_FR_ACCENTS.findall(original))
    en = len(words & _EN_WORDS)
    return "fr" if fr > en else "en"
