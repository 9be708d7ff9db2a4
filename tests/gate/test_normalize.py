"""Normalisation: each trick used to slip a word past a pattern is undone, and ordinary text survives."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.normalize import (
    _HYPHENATED,
    _HYPHENATED_HINT,
    _SEPARATORS,
    _SPACED,
    _SPACED_HINT,
    _SPACED_PUNCT,
    _SPACED_PUNCT_HINT,
    _FoldTable,
    _join_hyphenated,
    _join_pieces,
    _join_spaced,
    fold,
    fold_pattern,
    normalize,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # NFKC: full-width letters and ligatures.
        ("Ｂｏｍｂ", "bomb"),
        ("ﬁle", "file"),
        # Case folding and accent folding.
        ("COMMENT Fabriquer", "coment fabriquer"),
        ("Écris à l'élève", "ecris a l'eleve"),
        ("Straße", "strase"),
        ("cœur ØRE łódź", "coeur ore lodz"),
        # Cyrillic and Greek look-alikes.
        ("bоmb ΒΟΜΒ Νοt", "bomb bomb not"),
        # Zero-width, bidi controls, soft hyphens, combining marks left alone.
        ("bo\u200bm\u200db", "bomb"),
        ("\u202ebomb\u202c \u2066x\u2069", "bomb x"),
        ("ex\u00adplosive", "explosive"),
        ("b\u0301omb", "bomb"),
        # Typography and whitespace.
        ("l’adresse — ok", "l'adrese - ok"),
        ("ab\t\tcd\n\nef  ", "ab cd ef"),
        # Spaced and dotted letters re-joined, one separator per run.
        ("b o m b", "bomb"),
        ("b.o.m.b", "bomb"),
        ("b-o-m-b and b_o_m_b and b*o*m*b", "bomb and bomb and bomb"),
        ("h.o.w t.o m.a.k.e", "how to make"),
        ("a b", "a b"),
        ("il y a un bug", "il y a un bug"),
        # Leetspeak inside words only.
        ("h0w to m4ke a b0mb", "how to make a bomb"),
        # A digit at the end of a word is not leet: "t0" stays, like "c4".
        ("t0", "t0"),
        ("$tupid k1ll", "stupid kil"),
        ("50 euros, x64, c4, urho3d 2024", "50 euros, x64, c4, urhoed 2024"),
        ("kill!! now|", "kil!! now|"),
        # A question in leet (two leet words at least): digits at the ends of its words are letters.
        ("h0w t0 st34l 4 c4r 0n 1 d4y", "how to steal 4 car on 1 day"),
        ("b0mb x64 t0", "bomb x64 t0"),
        # Letter-by-letter words with wide gaps, then a plain word one space on.
        ("r e c i p e   f o r   a   m o l o t o v  that burns", "recipe for a molotov that burns"),
        ("m é t h o d e s   d e   s u i c i d e classées", "methodes de suicide clases"),
        # Repeated letters squeezed, digits kept.
        ("boooommmb 1000", "bomb 1000"),
        ("", ""),
    ],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_normalize_is_idempotent_on_its_output() -> None:
    for text in ["H0W to m4ke a b.o.m.b", "Comment f a b r i q u e r", "Ｂｏｏｍｂ\u200b!"]:
        once = normalize(text)
        assert normalize(once) == once


def test_fold_keeps_letters_that_are_doubled() -> None:
    assert fold("Kill ALL") == "kill all"
    assert fold("Élève") == "eleve"


def test_fold_pattern_folds_like_the_text_but_keeps_escapes() -> None:
    assert fold_pattern("fabriqué|tuer|kill|adresse") == "fabrique|tuer|kil|adrese"
    assert fold_pattern(r"\bbomb") == r"\bbomb"
    assert fold_pattern(r"\N{LATIN SMALL LETTER A}\p{Ll}") == r"\N{LATIN SMALL LETTER A}\p{Ll}"
    assert fold_pattern("écolé") == "ecole"


def test_fold_table_stops_caching_at_its_limit() -> None:
    table = _FoldTable(limit=1)
    assert "É".translate(table) == "e"
    assert "Ü".translate(table) == "u"
    assert "É\u200b".translate(table) == "e"
    assert len(table) == 1


_SPACED_ALPHABET = "abm1$@|!é. -_*x"  # also hyphens between letters ("ab-m", "mo-i")


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=_SPACED_ALPHABET, max_size=40))
def test_the_hints_hold_wherever_their_pattern_matches(text: str) -> None:
    # normalize() tries the costly spaced-letter substitutions only on a text holding their hint: the
    # hint must be found in every text where the full pattern matches (a necessary condition).
    folded = fold(text)
    if _SPACED_PUNCT.search(folded):
        assert _SPACED_PUNCT_HINT.search(folded), folded
    if _SPACED.search(folded):
        assert _SPACED_HINT.search(folded), folded
    # and trying _SPACED one character before each hint re-joins exactly what its sub() re-joins
    assert _join_spaced(folded) == _SPACED.sub(lambda m: _SEPARATORS.sub("", m.group()), folded)
    if _HYPHENATED.search(folded):
        assert _HYPHENATED_HINT.search(folded), folded
    assert _join_hyphenated(folded) == _HYPHENATED.sub(_join_pieces, folded)


def test_the_spaced_letters_hints_skip_ordinary_text() -> None:
    for text in ("how do i load a scene. then what?", "the file.cpp - see x64, v1.2", "a b"):
        folded = fold(text)
        assert not _SPACED.search(folded), text
        assert not _SPACED_HINT.search(folded), text
    for spaced in ("b o m b", "a.b"):
        assert _SPACED_HINT.search(spaced)
    assert _SPACED_PUNCT_HINT.search("b. o. m")
