"""Every regular expression that reads forum or LLM text is linear on hostile input (issue 13).

A member's post is hostile input after the signature check: Discourse signs every post. So every
pattern in ``worker``, ``gate``, ``sanitizer`` and ``backfill`` is timed here on worst-case inputs
(``tests/worst_case.py``: runs of its own delimiters, openers without closers, nested brackets, its
literal words repeated) up to Discourse's 32,000-character post limit, against ``budget_s`` per call
(0.5 s at 32,000 characters for one pattern, ``STAGE_FACTOR`` times that for a whole stage).

- Module-level patterns are found by importing every module, so a new one is covered without a line
  here. They are timed with ``findall`` (a scan from every position), except the few in ``ANCHORED``,
  which their module only uses at a fixed position (the test checks that it does).
- Patterns built inside functions are found in the source (``ast``) and must be listed in ``DYNAMIC``
  with the entry point that times them, so none is missed silently.
- Entry points (addressing, question extraction, terms, the gate, the sanitizer, text preparation)
  are timed as a whole on the worst cases of all their module's patterns.
- The gate's rules are data that change: each compiled rule pattern, whatever the shipped file holds,
  must finish within budget or stop at the gate's own timeout (``regex``'s ``timeout=``), which the
  gate turns into "no hit".
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import regex

from gate.matcher import Gate
from gate.normalize import normalize
from sanitizer import from_dicts, sanitize
from tests.worst_case import POST_LIMIT, over_budget
from worker.addressing import cooked_mentions, mentions
from worker.clients.llm import cut_to_last_sentence
from worker.domain import ForumPost, ForumTopic
from worker.generation.fence import neutralise
from worker.generation.offline import phrases_for
from worker.html_text import html_to_text
from worker.question import read_question
from worker.retrieval.keyword import TermSelector
from worker.testing.forum import FakeForum

PACKAGES = ("worker", "gate", "sanitizer", "backfill")
STAGE_FACTOR = 4.0
"""A whole stage gets four times one pattern's budget: 2 s for a 32,000-character post."""
ROOT = Path(__file__).resolve().parent.parent
_CALLS = frozenset({"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"})

ANCHORED: dict[str, str] = {
    "sanitizer.blocks._OPEN": "fullmatch of one line",
    "gate.normalize._LEET_TOKEN": "match at the start of a word that holds a leet core, once per word",
    "gate.normalize._TOKEN_RUN": "match on the reversed text from a leet core back to its word's start",
}
"""Module patterns used only with ``match``/``fullmatch`` at one position (timed that way)."""

DYNAMIC: dict[str, str] = {
    "worker/addressing.py:mention_pattern": "mentions",
    "sanitizer/blocks.py:split_blocks": "sanitize",
    # Every rule pattern (through gate.rules.LazyPattern), each timed by the gate rule test; every
    # call carries the gate's timeout too.
    "gate/rules.py:_regex": "gate rule patterns",
    # The offline generator reads only the prompt citebot built: its patterns anchor on fence markers
    # holding a random token that member text cannot contain (worker.generation.fence).
    "worker/generation/offline.py:complete": "prompt built by citebot",
}
"""Patterns compiled inside functions, by file and function, and what times them."""


def _modules() -> Iterator[ModuleType]:
    for package in PACKAGES:
        root = importlib.import_module(package)
        yield root
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            yield importlib.import_module(info.name)


def _module_patterns() -> dict[str, re.Pattern[str] | regex.Pattern[str]]:
    found: dict[str, re.Pattern[str] | regex.Pattern[str]] = {}
    seen: set[int] = set()
    for module in _modules():
        for attr, value in vars(module).items():
            is_pattern = isinstance(value, (re.Pattern, regex.Pattern)) and isinstance(value.pattern, str)
            if is_pattern and id(value) not in seen:
                seen.add(id(value))
                found[f"{module.__name__}.{attr}"] = value
    return found


MODULE_PATTERNS = _module_patterns()


def _sources() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def _dynamic_calls() -> set[str]:
    """``file:function`` of every ``re.*``/``regex.*`` call inside a function body."""
    found: set[str] = set()
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("re", "regex")
                    and node.func.attr in _CALLS
                ):
                    found.add(f"{path.relative_to(ROOT)}:{function.name}")
    return found


def test_every_pattern_built_in_a_function_is_listed() -> None:
    assert _dynamic_calls() == set(DYNAMIC)


def test_the_scan_finds_the_patterns_of_every_stage() -> None:
    modules = {name.rsplit(".", 1)[0] for name in MODULE_PATTERNS}
    for stage in ("worker.addressing", "worker.question", "worker.retrieval.keyword", "gate.normalize"):
        assert stage in modules
    assert any(m.startswith("sanitizer.") for m in modules)
    assert "worker.html_text" in modules


def test_anchored_patterns_are_only_used_anchored() -> None:
    for name in ANCHORED:
        module, attr = name.rsplit(".", 1)
        path = ROOT / (module.replace(".", "/") + ".py")
        uses = re.findall(rf"\b{re.escape(attr)}\.(\w+)\(", path.read_text(encoding="utf-8"))
        assert uses, name
        assert set(uses) <= {"match", "fullmatch"}, (name, uses)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODULE_PATTERNS))
def test_module_pattern_is_linear_on_worst_cases(name: str) -> None:
    pattern = MODULE_PATTERNS[name]
    call: Callable[[str], object] = pattern.match if name in ANCHORED else pattern.findall
    assert over_budget(call, pattern.pattern) is None


def _sources_of(*modules: str) -> str:
    return "".join(p.pattern for n, p in MODULE_PATTERNS.items() if n.rsplit(".", 1)[0] in modules)


def _read_question(text: str) -> object:
    """A post of ``text`` replying to, and quoting, an opening post of ``text`` (raw and cooked)."""
    opening = ForumPost(1, 1, 1, "alice", 2, cooked=text, raw=text)
    post = ForumPost(2, 1, 2, "bob", 3, cooked=text, raw=text, reply_to_post_number=1)
    topic = ForumTopic(1, text[:200], "t", 1, posts=(opening,))
    return read_question(post, topic, FakeForum(), "citebot").text


_EVIDENCE = from_dicts([{"n": 1, "topic_id": 3, "post_number": 1, "slug": "a-topic", "title": "A topic"}])
_GATE = Gate.load()
_TERMS = TermSelector()

ENTRY_POINTS: dict[str, tuple[Callable[[str], object], str]] = {
    "mentions": (lambda t: mentions(t, "citebot"), _sources_of("worker.addressing") + "[quote][code]<!---->"),
    "cooked_mentions": (
        lambda t: cooked_mentions("@citebot" + t, "citebot"),
        _sources_of("worker.addressing") + '<a class="mention"></a><aside class="quote">',
    ),
    "read_question": (
        lambda t: _read_question(t),
        _sources_of("worker.question", "worker.quotes") + '[quote="a, post:1, topic:1"]',
    ),
    "keyword_queries": (_TERMS.keyword_queries, _sources_of("worker.retrieval.keyword")),
    "gate check": (
        _GATE.check,
        _sources_of("gate.normalize", "gate.matcher", "gate.language", "gate.readings", "gate.support"),
    ),
    "sanitize": (
        lambda t: sanitize(t, _EVIDENCE, allow_canned=False),
        _sources_of(*{n.rsplit(".", 1)[0] for n in MODULE_PATTERNS if n.startswith("sanitizer.")}),
    ),
    "html_to_text": (html_to_text, _sources_of("worker.html_text") + "<pre><aside class='quote'>"),
    "neutralise": (neutralise, _sources_of("worker.generation.fence")),
    "phrases_for": (phrases_for, _sources_of("worker.generation.offline")),
    "cut_to_last_sentence": (cut_to_last_sentence, _sources_of("worker.clients.llm")),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_entry_point_is_linear_on_worst_cases(name: str) -> None:
    call, source = ENTRY_POINTS[name]
    assert over_budget(call, source, factor=STAGE_FACTOR) is None


def test_every_dynamic_pattern_has_its_entry_point() -> None:
    covered = set(ENTRY_POINTS) | {"gate rule patterns", "prompt built by citebot"}
    assert set(DYNAMIC.values()) <= covered


def _rule_patterns() -> Iterator[tuple[str, regex.Pattern[str]]]:
    for rule in _GATE.rules.rules:
        yield f"{rule.id} pattern", rule.pattern
        if rule.exception is not None:
            yield f"{rule.id} exception", rule.exception
    for frame in {f.id: f for rule in _GATE.rules.rules for f in rule.frames}.values():
        yield f"frame {frame.id}", frame.pattern
        if frame.turn is not None:
            yield f"frame {frame.id} turn", frame.turn
    if _GATE.rules.real_world is not None:
        yield "real_world", _GATE.rules.real_world


@pytest.mark.slow
@pytest.mark.parametrize(("name", "pattern"), list(_rule_patterns()), ids=[n for n, _ in _rule_patterns()])
def test_gate_rule_pattern_is_linear_or_stops_at_the_gate_timeout(
    name: str, pattern: regex.Pattern[str]
) -> None:
    def search(text: str) -> object:
        # What the gate runs: the normalised question, cut to the gate's input limit, under its timeout.
        try:
            return pattern.search(normalize(text[: _GATE.max_chars]), timeout=_GATE.timeout_s)
        except TimeoutError:
            return None

    # A search the timeout stops takes the timeout, and a little more under load.
    assert over_budget(search, pattern.pattern, floor_s=4 * _GATE.timeout_s) is None


def test_the_worst_cases_reach_discourses_post_limit() -> None:
    from tests.worst_case import SIZES, worst_cases

    assert max(SIZES) == POST_LIMIT
    assert all(len(t) >= POST_LIMIT * 0.9 for t in worst_cases("(`+)", POST_LIMIT))
