"""The figures in docs/*.md agree with the saved results JSON (``python -m eval.doc_figures``)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from eval import doc_figures
from eval.doc_figures import BLOCK, DOCS, RENDERERS, rewrite

DOC_PATHS = sorted(DOCS.glob("*.md"))


@pytest.mark.parametrize("path", DOC_PATHS, ids=lambda p: p.name)
def test_generated_blocks_are_current(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert rewrite(text) == text, "run `python -m eval.doc_figures`"


def test_the_figure_docs_hold_their_blocks() -> None:
    names = {m["name"] for path in DOC_PATHS for m in BLOCK.finditer(path.read_text(encoding="utf-8"))}
    assert names <= set(RENDERERS), f"blocks without a renderer: {names - set(RENDERERS)}"
    for doc, block in (
        ("performance.md", "bench-summary"),
        ("eval.md", "eval-defaults"),
        ("eval.md", "zone-thresholds"),
    ):
        assert f"<!-- BEGIN generated {block} -->" in (DOCS / doc).read_text(encoding="utf-8")


def test_a_doc_that_disagrees_with_its_json_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    for path in doc_figures.BENCH.glob("*.json"):
        (bench / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    doc = docs / "performance.md"
    doc.write_text(
        "intro\n<!-- BEGIN generated bench-summary -->\nold figures\n"
        "<!-- END generated bench-summary -->\nend\n"
    )
    monkeypatch.setattr(doc_figures, "BENCH", bench)
    monkeypatch.setattr(doc_figures, "DOCS", docs)

    assert doc_figures.main(["--check"]) == 1
    assert doc_figures.main([]) == 0
    assert doc_figures.main(["--check"]) == 0
    written = doc.read_text()
    assert written.startswith("intro\n")
    assert written.endswith("end\n")
    assert "old figures" not in written

    data = json.loads((bench / "webhook.json").read_text())
    data["deliveries_per_s"] = 1234.0
    (bench / "webhook.json").write_text(json.dumps(data))
    assert doc_figures.main(["--check"]) == 1
    doc_figures.main([])
    assert "1,234 deliveries/s" in doc.read_text()


def test_the_rules_table_counts_the_rules_file() -> None:
    folder = doc_figures.ROOT / "gate" / "rules"
    rules = [
        r
        for p in folder.glob("*.toml")
        for r in tomllib.loads(p.read_text(encoding="utf-8")).get("rules", [])
    ]
    categories = {rule["category"] for rule in rules}
    text = RENDERERS["gate-rules"]()
    assert f"{len(rules)} rules in {len(categories)} categories" in text
    assert sum(int(line.split("|")[2]) for line in text.splitlines() if line.startswith("| `")) == len(rules)


def test_an_unknown_block_is_an_error() -> None:
    with pytest.raises(KeyError):
        rewrite("<!-- BEGIN generated nothing-like-this -->\nx\n<!-- END generated nothing-like-this -->")
