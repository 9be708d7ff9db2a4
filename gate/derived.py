"""What loading the rules derives from their patterns, remembered across processes.

Loading the shipped rules reads its patterns with the standard library's parser
(:mod:`gate.literals`: the word beginnings every match holds, for the derived triggers) and
compiles them to validate them: seconds of CPU in every fresh process. Both are pure functions of
a pattern's text, so ``gate/derived.json`` (built by ``make gate``: ``python -m gate.build``) keeps
them, keyed by a digest of each pattern: its readings, and whether it compiled (and matched no
empty text). A pattern the file does not hold (a rule just edited, a rules file of one's own) is
read and validated at load, so the file changes how long a load takes, never what it gives; it is
used only when ``KEY`` (the reading code, the ``regex`` version and the Python version) is the one
it was built with. The compiled patterns themselves are not kept (``regex`` patterns pickle as their source):
the rules compile each pattern the first time a question needs it (``gate.rules.LazyPattern``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

import regex

FORMAT = 1
FILE = "derived.json"
_MISSING = object()


def _key() -> str:
    """What the remembered readings depend on besides the pattern: the code that reads them (the
    ``gate.literals`` source, this format) and the engines (``regex``, Python's parser)."""
    source = resources.files("gate").joinpath("literals.py").read_bytes()
    parts = [
        str(FORMAT),
        regex.__version__,
        f"{sys.version_info[0]}.{sys.version_info[1]}",
        hashlib.sha256(source).hexdigest(),
    ]
    return "/".join(parts)


def digest(pattern: str) -> str:
    return hashlib.blake2b(pattern.encode("utf-8"), digest_size=12).hexdigest()


class _Store:
    """The remembered readings (loaded on first use), what this process missed, and, while
    :func:`recording`, every reading made."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] | None = None
        self.recorded: dict[str, dict[str, Any]] | None = None
        self.reuse = False  # while recording: take what the file holds (and record it) instead of computing
        self.misses = 0

    def known(self) -> dict[str, dict[str, Any]]:
        if self.entries is None:
            self.entries = {}
            try:
                data = json.loads(resources.files("gate").joinpath(FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = None
            if isinstance(data, dict) and data.get("key") == _key():
                self.entries = data.get("patterns", {})
        return self.entries


_STORE = _Store()


def remembered(
    kind: str,
    pattern: str,
    compute: Callable[[], Any],
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
) -> Any:
    """``compute()``, or the reading ``kind`` of ``pattern`` the file remembers."""
    name = digest(pattern)
    recorded = _STORE.recorded
    if recorded is None or _STORE.reuse:
        found = _STORE.known().get(name, {}).get(kind, _MISSING)
        if found is not _MISSING:
            if recorded is not None:
                recorded.setdefault(name, {})[kind] = found
            return decode(found)
        _STORE.misses += 1
        if recorded is None:
            return compute()
    value = compute()
    recorded.setdefault(name, {})[kind] = encode(value)
    return value


def is_valid(pattern: str, kind: str) -> bool:
    """Whether ``pattern`` is remembered to have passed the check ``kind`` (``"compiles"``, or
    ``"nonempty"``: compiles and matches no empty text)."""
    if _STORE.recorded is not None and not _STORE.reuse:
        return False
    name = digest(pattern)
    valid = bool(_STORE.known().get(name, {}).get(kind))
    if valid and _STORE.recorded is not None:
        _STORE.recorded.setdefault(name, {})[kind] = True
    return valid


def passed(pattern: str, kind: str) -> None:
    """``pattern`` passed the check ``kind`` (remembered while recording)."""
    if _STORE.recorded is not None:
        _STORE.recorded.setdefault(digest(pattern), {})[kind] = True


def misses() -> int:
    """Readings this process computed because the file did not hold them (0 after a load of the
    shipped rules when the file is up to date)."""
    return _STORE.misses


@contextmanager
def recording(*, fresh: bool = True) -> Iterator[dict[str, dict[str, Any]]]:
    """Every reading and check made inside: computed afresh (``fresh``), or taken from the file
    where it holds them (the rest computed)."""
    from gate import literals, rules

    caches = (literals._word_needs, literals.word_beginnings, rules._regex)
    for cache in caches:
        cache.cache_clear()
    _STORE.recorded, _STORE.reuse = {}, not fresh
    try:
        yield _STORE.recorded
    finally:
        _STORE.recorded, _STORE.reuse = None, False
        for cache in caches:
            cache.cache_clear()


def build(*, fresh: bool = True) -> dict[str, Any]:
    """The file's content for the shipped rules: load them (and a gate over them), every reading
    made afresh (``fresh``), or only those of the patterns the file does not hold yet."""
    from gate.matcher import Gate
    from gate.rules import load_rules

    with recording(fresh=fresh) as found:
        Gate(load_rules())
    return {"key": _key(), "patterns": {name: found[name] for name in sorted(found)}}


def render(data: dict[str, Any]) -> str:
    """One entry a line (a diff shows the patterns that changed)."""
    lines = [
        f"{json.dumps(name)}: {json.dumps(entry, sort_keys=True)}" for name, entry in data["patterns"].items()
    ]
    body = ",\n".join(lines)
    return f'{{"key": {json.dumps(data["key"])},\n "patterns": {{\n{body}\n}}}}\n'
