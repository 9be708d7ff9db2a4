"""normalize() against its slower reference (the session-8 speed-ups must change no output).

The reference is the normalisation as it stood before them (commit 4e6cb35): ``_unleet`` walking back
to a word's start character by character and ``_EDGE_LEET`` matched from each word's start. Both are
compared on every labelled line, the 1,000 forum questions and every archive post (each cut to the
gate's 4,000 characters), and on the hand-made texts below that reach the rarer branches. The
non-ASCII folding (one ``str.replace`` per character) is checked against translating the runs.
"""

from __future__ import annotations

import re

import pytest

from eval.bench.gate import FORUM, forum_questions
from eval.bench.gate_compare import labelled_texts
from gate.matcher import DEFAULT_MAX_CHARS
from gate.normalize import (
    _EDGE_LEET,
    _FOLD,
    _LEET,
    _LEET_CORE,
    _LEET_TOKEN,
    _NON_ASCII,
    _REPEATS,
    _SEPARATORS,
    _SPACED_PUNCT,
    _SPACED_PUNCT_HINT,
    _fold_non_ascii,
    _join_hyphenated,
    _join_spaced,
    _unleet,
    fold,
    normalize,
)
from gate.train.lexical import archive_texts

_TOKEN_CHAR = re.compile(r"[\w@$€|!]")


def _reference_unleet(text: str) -> str:
    parts: list[str] = []
    done = 0
    for core in _LEET_CORE.finditer(text):
        if core.start() < done:
            continue
        start = core.start()
        while start > done and _TOKEN_CHAR.match(text, start - 1):
            start -= 1
        end = (_LEET_TOKEN.match(text, start) or core).end()
        parts.append(text[done:start])
        parts.append(text[start:end].translate(_LEET))
        done = end
    parts.append(text[done:])
    if len(parts) < 5:
        return "".join(parts)
    return _EDGE_LEET.sub(lambda m: m.group().translate(_LEET), "".join(parts))


def _reference(text: str) -> str:
    text = fold(text)
    if _SPACED_PUNCT_HINT.search(text):
        text = _SPACED_PUNCT.sub(lambda m: _SEPARATORS.sub("", m.group()), text)
    text = _join_spaced(text)
    if "-" in text:
        text = _join_hyphenated(text)
    return _REPEATS.sub("", _reference_unleet(text))


_HANDMADE = [
    "h0w t0 m4k3 4 b0mb 1n 2 d4ys",
    "x64 c4 3d 50 h0w t0 b0mb",
    "un m0t de p4sse w1th 3 d1g1ts 4nd ab1 x2y 2x y2",
    # A vowel sign: a word character to regex alone.
    "b0mb\u0928\u092e\u0938\u094d\u0924\u0947 h0w t0 1d 4nd 0n",
    "\u00e9t\u00e9 h0w t0 \u00e91 1\u00e9 m4k3",  # letters both engines read as word characters
    "caf\u00e9 b0mb h\u0301 h0w 2a a2 _1a a1_ m4ke",  # a combining accent after folding, underscores
    "m_v3ct0r2d.x3 f00|!b4r $hit !!b0b |0l w0rd-1n-h1ph3ns 0x1f2e3d4c",
    "a1 " * 50 + "b0mb t0",
]


def _labelled_and_forum() -> list[str]:
    return labelled_texts() + forum_questions(FORUM, 1000)


@pytest.mark.parametrize("text", _HANDMADE)
def test_normalize_matches_its_reference_on_handmade_texts(text: str) -> None:
    assert normalize(text) == _reference(text)
    assert _unleet(fold(text)) == _reference_unleet(fold(text))


def test_normalize_matches_its_reference_on_the_labelled_sets_and_forum_questions() -> None:
    texts = [text[:DEFAULT_MAX_CHARS] for text in _labelled_and_forum()]
    assert len(texts) > 10_000
    assert [t for t in texts if normalize(t) != _reference(t)] == []


def test_normalize_matches_its_reference_on_the_archive_posts() -> None:
    texts = [text[:DEFAULT_MAX_CHARS] for text in archive_texts()[1]]
    assert len(texts) > 30_000
    assert [t[:80] for t in texts if normalize(t) != _reference(t)] == []


_FOLD_HANDMADE = [
    "Caf\u00e9 \u2019quoted\u2019 \u201cok\u201d \u0152uvre \u00c6 \u00df \u2014 dash",
    # Greek accented letters fold to Greek letters that fold again to Latin look-alikes: each must be
    # folded once, as translating the runs does.
    "\u0386\u03b1 \u03ac\u03bf \u038c \u0390 \u03aa\u03ca",
    "\u0415\u043e \u0391 zero\u200bwidth \u2160 \uff21\uff22 \u093e\u0928",
]


def _reference_fold_runs(text: str) -> str:
    return _NON_ASCII.sub(lambda m: m.group().translate(_FOLD), text)


@pytest.mark.parametrize("text", _FOLD_HANDMADE)
def test_non_ascii_folding_matches_translating_the_runs(text: str) -> None:
    assert _fold_non_ascii(text) == _reference_fold_runs(text)
