"""What loading the rules derives, remembered in ``gate/derived.json`` (``gate.derived``): a fresh
process loads the shipped gate without reading or compiling its patterns again, and what it
remembers is what a fresh reading gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gate import Gate, derived, rules
from gate.rules import LazyPattern, load_rules, parse_rules

REPO = Path(__file__).resolve().parents[2]

_FRESH_LOAD = """
import json, time
start = time.process_time()
from gate import Gate, derived, rules
gate = Gate.load()
cpu = time.process_time() - start
patterns = sorted(r.pattern.pattern for r in gate.rules.rules)
import hashlib
print(json.dumps({"cpu": cpu, "misses": derived.misses(),
                  "digest": hashlib.sha256("\\n".join(patterns).encode()).hexdigest()}))
"""


def _fresh_load(seed: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_LOAD], env=env, cwd=REPO, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_fresh_process_loads_the_gate_from_what_is_remembered() -> None:
    found = _fresh_load("1")
    assert found["misses"] == 0, "gate/derived.json is out of date: run `make gate`"
    # About 9 s of CPU when every pattern was read and compiled at load; under 1 s now.
    assert float(found["cpu"]) < 4.0  # type: ignore[arg-type]


def test_the_rules_are_the_same_text_in_every_process() -> None:
    # The lexicons' alternatives once sorted by length alone, ties in set order: the patterns
    # changed with the hash seed, and no remembered reading could be found by its text.
    assert _fresh_load("1")["digest"] == _fresh_load("2")["digest"]


@pytest.mark.slow
def test_what_is_remembered_is_what_a_fresh_reading_gives() -> None:
    committed = json.loads((REPO / "gate" / derived.FILE).read_text(encoding="utf-8"))
    assert derived.build() == committed, "gate/derived.json is out of date: run `make gate`"


@pytest.mark.slow  # a fresh reading of every pattern (~12 s); the fast tier keeps the 0-miss load check
def test_remembered_and_fresh_readings_give_the_same_rules() -> None:
    remembered = Gate(load_rules())
    with derived.recording():
        fresh = Gate(load_rules())
    assert remembered.rules == fresh.rules


def test_a_pattern_is_compiled_when_first_searched() -> None:
    source = r"\bbomb\w*(?#lazy)"
    compiled = rules._regex.cache_info().misses
    pattern = LazyPattern(source)
    assert rules._regex.cache_info().misses == compiled  # nothing compiled yet
    assert pattern.search("a pipe bombing").group() == "bombing"
    assert pattern.match("bombs").span() == (0, 5)
    assert [m.group() for m in pattern.finditer("bomb bomber")] == ["bomb", "bomber"]
    assert pattern.fullmatch("bomb") is not None
    assert rules._regex.cache_info().misses == compiled + 1
    assert pattern == LazyPattern(source)
    with pytest.raises(AttributeError):
        pattern.sub  # noqa: B018


def test_a_pattern_not_remembered_is_still_validated() -> None:
    # A rules file of one's own: its patterns are not in gate/derived.json, so they are compiled at
    # load as before, and a bad one names the rule.
    replies = '[replies.weapons]\nen = "no"\nfr = "non"\n'
    rule = '[[rules]]\nid = "w.x"\ncategory = "weapons"\npatterns = [{}]\n'
    good = parse_rules("version = 1\n" + replies + rule.format("'zorglub[0-9]+'"), source="t")
    assert good.rules[0].pattern.search("zorglub42")
    for bad, reason in (("'zorglub('", "invalid regular expression"), ("'(?:zorglub)?'", "empty text")):
        with pytest.raises(Exception, match=reason):
            parse_rules("version = 1\n" + replies + rule.format(bad), source="t")
