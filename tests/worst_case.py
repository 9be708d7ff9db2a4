"""Worst-case inputs for regular expressions over hostile text, and a stopwatch with a budget.

A backtracking pattern is slow on long runs of its own delimiters, on a delimiter alternating with a
letter (an opener with no closer), on a long run of one delimiter before such alternations (the shape
of the backtick reproducer of issue 13), on nested brackets and on its own literal words repeated.
:func:`worst_cases` derives those from a pattern's source, at any length.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator

POST_LIMIT = 32_000
"""Discourse's default ``max_post_length``: the longest text a member can post."""
SIZES = (200, 2_000, POST_LIMIT)
"""Lengths tried in turn, so that a superlinear case fails fast at a small size instead of hanging."""
_BRACKETS = (("(", ")"), ("[", "]"), ("{", "}"), ("<", ">"))
_ALWAYS = " \n\t@`"


def budget_s(length: int) -> float:
    """Seconds one call may take on ``length`` characters: about 100x a linear scan on an idle
    machine (a 32,000-character call gets 0.5 s), generous for a loaded shared test machine, and still
    far below what a backtracking pattern takes (issue 13's 8 KB post took ~20 s)."""
    return 0.02 + length * 15e-6


def delimiters(source: str) -> list[str]:
    """The non-alphanumeric characters a pattern's source names, plus whitespace, ``@`` and ``` ` ```."""
    found = {c for c in source if not c.isalnum() and c.isprintable() and c != "\\"}
    return sorted(found | set(_ALWAYS))


def words(source: str, limit: int = 8) -> list[str]:
    """The longest literal words in a pattern's source (``quote``, ``thanks``, ``http``)."""
    current: list[str] = []
    found: set[str] = set()
    for c in source + " ":
        if c.isalpha():
            current.append(c)
            continue
        if len(current) >= 3:
            found.add("".join(current))
        current = []
    return sorted(found, key=lambda w: (-len(w), w))[:limit]


def worst_cases(source: str, length: int) -> Iterator[str]:
    """Texts of about ``length`` characters that make a backtracking pattern over ``source`` slow."""
    delims = delimiters(source)
    for c in delims:
        yield c * length
        yield (c + "a") * (length // 2)
        yield c * (length // 100) + ("a" + c) * (length // 2)
        yield (c + " ") * (length // 2)
    for opening, closing in _BRACKETS:
        yield opening * (length // 2) + closing * (length // 2)
        yield (opening + "a") * (length // 2)
    for word in words(source):
        unit = f"[{word}]{word} "
        yield unit * (length // len(unit))
        yield "\n" * (length // 2) + (word + "\n") * (length // (2 * len(word) + 2))
    mix = "".join(delims) + "a"
    yield mix * (length // len(mix))


def elapsed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def over_budget(
    call: Callable[[str], object], source: str, factor: float = 1.0, floor_s: float = 0.0
) -> str | None:
    """The first worst case of ``source`` that ``call`` takes longer than its budget on, described, or
    None. Sizes go up in turn, so a superlinear call fails at a small size rather than hang the run.
    ``factor`` scales the budget for a whole stage (many patterns and per-character work, not one scan);
    ``floor_s`` is a lower bound (a call that stops at a timeout of its own may take that long)."""
    for length in SIZES:
        allowed = max(floor_s, factor * budget_s(length))
        for text in worst_cases(source, length):
            run = functools.partial(call, text)
            seconds = elapsed(run)
            if seconds > allowed:  # a slow pattern is slow every time; a busy machine is not
                seconds = min(seconds, elapsed(run), elapsed(run))
            if seconds > allowed:
                return f"{seconds:.3f} s > {allowed:.3f} s on {length} chars starting {text[:24]!r}"
    return None
