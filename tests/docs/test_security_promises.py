"""docs/security.md holds no promise without a test: every row of its promise tables names at least one
test, and every test it names exists (a file, or a file and a test function in it)."""

from __future__ import annotations

import re

from tests.services import ROOT

SECURITY = ROOT / "docs" / "security.md"
_ROW = re.compile(r"^\| (?!promise \|)(?P<promise>[^|]+?) \| (?P<held>.*) \|$")
_TEST = re.compile(r"`(?P<path>tests/[^`:]+\.py)(?:::(?P<name>\w+))?`")


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in SECURITY.read_text("utf-8").splitlines():
        m = _ROW.match(line)
        if m and not line.startswith("|---"):
            rows.append((m["promise"], m["held"]))
    return rows


def test_every_promise_names_a_test_that_exists() -> None:
    rows = _rows()
    assert len(rows) >= 30  # the tables were read
    missing = []
    for promise, held in rows:
        tests = list(_TEST.finditer(held))
        if not tests:
            missing.append(f"{promise}: no test named")
        for t in tests:
            path = ROOT / t["path"]
            if not path.is_file():
                missing.append(f"{promise}: {t['path']} does not exist")
            elif t["name"] and not re.search(rf"^(async )?def {t['name']}\(", path.read_text("utf-8"), re.M):
                missing.append(f"{promise}: {t['path']}::{t['name']} does not exist")
    assert not missing, "\n".join(missing)
