"""Table tests: real LLM-style answers (and attacks on them) with their exact sanitised output.

Each row of ``llm_outputs.jsonl`` holds the input, its evidence, options, the exact expected Markdown,
``ok``, the cited and dropped numbers, and optionally substrings that must be ``absent``. Every row is
also audited by markdown-it (only evidence links, no HTML, no image, no live mention) and sanitised a
second time to check idempotence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sanitizer import from_dicts, sanitize
from tests.sanitizer.oracle import audit, unsafe_tags

ROWS = [json.loads(line) for line in (Path(__file__).parent / "llm_outputs.jsonl").read_text().splitlines()]


def _options(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ("links", "base_url", "allow_canned") if key in row}


def _targets(row: dict[str, Any]) -> set[str]:
    base = (row.get("base_url") or "").rstrip("/")
    return {source.link(row.get("links", "post"), base) for source in from_dicts(row["evidence"])}


@pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])
def test_llm_output(row: dict[str, Any]) -> None:
    result = sanitize(row["input"], from_dicts(row["evidence"]), **_options(row))
    assert result.text == row["expected"]
    assert result.ok is row["ok"]
    assert list(result.cited) == row["cited"]
    assert list(result.dropped) == row["dropped"]
    for fragment in row.get("absent", []):
        assert fragment not in result.text
    if "canned" not in result.reasons:
        assert audit(result.text, _targets(row)) == []
        assert unsafe_tags(result.text, _targets(row)) == []
    again = sanitize(result.text, from_dicts(row["evidence"]), **_options(row))
    assert again.text == result.text


def test_table_covers_every_kind_of_attack() -> None:
    names = " ".join(row["name"] for row in ROWS)
    for kind in ("injection", "image", "html", "bbcode", "mention", "autolink", "citation", "canned"):
        assert kind in names
