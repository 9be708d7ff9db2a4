"""``python -m eval.bench NAME``: every benchmark is listed by name, and only benchmarks are."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from eval.bench.__main__ import BENCHES, main
from tests.services import ROOT


def _has_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)


def test_every_module_with_a_main_is_a_benchmark() -> None:
    folder = ROOT / "eval" / "bench"
    with_main = {p.stem for p in folder.glob("*.py") if p.stem != "__main__" and _has_main(p)}
    assert set(BENCHES) == with_main
    assert {"gate_head", "report"}.isdisjoint(BENCHES)  # helpers, not benchmarks


def test_an_unknown_name_is_refused_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no_such_bench"]) == 2
    err = capsys.readouterr().err
    assert "unknown benchmark 'no_such_bench'" in err
    assert "webhook_costs" in err


def test_help_lists_the_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "benchmarks: answer_cost, api_budget" in out
