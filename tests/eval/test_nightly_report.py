"""Floors, regressions, the dated folder and the rendered report (no services: probes only, and
results made by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.__main__ import main
from eval.evaluation.configs import CONFIGS
from eval.evaluation.evaluate import METRICS, Outcome
from eval.evaluation.nightly import check_floors, check_regressions, load_floors, previous_run, run_nightly
from eval.evaluation.runner import build_results, write_report
from worker.settings import Settings

FLOORS = {
    "regression": {"max_drop": 0.03, "metrics": ["topic_hit@5"]},
    "floors": {"posts": {"topic_hit@5": 0.7}, "legacy": {"topic_hit@5": 0.4}},
    "probes": {"min_passed_fraction": 1.0},
}


def test_floors_judge_each_configured_metric_and_the_probes() -> None:
    results = {
        "configs": {"posts": {"topic_hit@5": 0.69}},  # legacy not run: not judged
        "probes": {"n": 2, "passed": 1, "failed": ["p2"], "probes": []},
    }
    checks = {c.name: c for c in check_floors(results, FLOORS)}
    assert set(checks) == {"floor posts topic_hit@5", "floor probes"}
    assert not checks["floor posts topic_hit@5"].ok
    assert checks["floor posts topic_hit@5"].detail == "0.690 (floor 0.700)"
    assert not checks["floor probes"].ok
    assert "p2" in checks["floor probes"].detail


def test_a_drop_beyond_max_drop_or_a_probe_that_stopped_passing_is_a_regression() -> None:
    before = {
        "configs": {"posts": {"topic_hit@5": 0.80}, "legacy": {"topic_hit@5": 0.50}},
        "probes": {"probes": [{"id": "p1", "passed": True}, {"id": "p2", "passed": False}]},
    }
    now = {
        "configs": {"posts": {"topic_hit@5": 0.76}, "legacy": {"topic_hit@5": 0.48}},
        "probes": {
            "probes": [{"id": "p1", "passed": False, "reasons": ["gate"]}, {"id": "p2", "passed": False}]
        },
    }
    checks = {c.name: c.ok for c in check_regressions(now, before, FLOORS)}
    assert checks == {
        "regression posts topic_hit@5": False,  # -0.04
        "regression legacy topic_hit@5": True,  # -0.02 is noise
        "regression probe p1": False,  # p2 failed before too: not a regression
    }


def test_previous_run_is_the_latest_other_dated_folder(tmp_path: Path) -> None:
    for name in ("2026-11-01", "2026-11-20", "2026-11-30", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text("{}")
    (tmp_path / "2026-11-25").mkdir()  # no results: an aborted run
    found = previous_run(tmp_path, "2026-11-30")
    assert found is not None
    assert found.name == "2026-11-20"
    assert previous_run(tmp_path / "missing", "2026-11-30") is None


def test_nightly_probes_only_writes_the_dated_report_and_fails_on_a_floor(tmp_path: Path) -> None:
    code, folder = run_nightly(tmp_path, retrieval=None, date="2026-11-30")
    assert code == 0
    assert folder == tmp_path / "2026-11-30"
    results = json.loads((folder / "results.json").read_text())
    assert results["ok"]
    assert results["probes"]["passed"] == results["probes"]["n"] > 20
    assert "| refuse-en-01 | refuse | en | block | pass |" in (folder / "report.md").read_text()

    floors = tmp_path / "floors.toml"
    floors.write_text("[probes]\nmin_passed_fraction = 1.5\n")
    code, folder = run_nightly(tmp_path, retrieval=None, floors_path=floors, date="2026-12-01")
    assert code == 1
    report = (folder / "report.md").read_text()
    assert "FAILED: 1" in report
    assert "Previous run: `2026-11-30`" in report


def test_shipped_floors_parse() -> None:
    floors = load_floors()
    assert floors["regression"]["max_drop"] > 0
    assert set(floors["floors"]) <= set(CONFIGS)


def outcome(qid: str, config: str, hit: bool, logit: float | None, *, ood: bool = False) -> Outcome:
    metrics = {} if ood else dict.fromkeys(METRICS, float(hit))
    return Outcome(
        qid, config, not ood, ("out_of_domain",) if ood else ("answerable",), metrics,
        None if ood else (1 if hit else None), None, logit, "abstain" if (logit or 0) < -4 else "normal",
        12.0, (), (),
    )  # fmt: skip


def test_report_renders_the_table_and_the_plots(tmp_path: Path) -> None:
    configs = [CONFIGS["posts"], CONFIGS["posts+keyword+rerank"]]
    outcomes = [
        outcome("a", "posts", True, None),
        outcome("b", "posts", False, None),
        outcome("a", "posts+keyword+rerank", True, 3.0),
        outcome("b", "posts+keyword+rerank", True, 1.0),
        outcome("o", "posts+keyword+rerank", False, -5.0, ood=True),
    ]
    settings = Settings.model_validate({})
    results = build_results(outcomes, configs, settings, {"date": "2026-11-30", "posts_indexed": 10})
    assert results["configs"]["posts"]["topic_hit@5"] == 0.5
    assert results["configs"]["posts+keyword+rerank"]["topic_hit@5"] == 1.0
    assert results["abstention"]["posts+keyword+rerank"]["recall"] == 1.0
    files = write_report(results, tmp_path)
    names = sorted(p.name for p in files)
    assert names == ["configs.png", "latency.png", "report.md", "results.json", "zones.png"]
    for png in tmp_path.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "results.json").read_text()) == results
    md = (tmp_path / "report.md").read_text()
    assert "| posts | 2 | 0.500 | 0.500 |" in md
    assert "![zones.png](zones.png)" in md


def test_cli_nightly_probes_only_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nightly", "--probes-only", "--out", str(tmp_path), "--date", "2026-11-30"]) == 0
    assert (tmp_path / "2026-11-30" / "report.md").is_file()
    assert "nightly: ok" in capsys.readouterr().out
    missing = str(tmp_path / "nope.jsonl")
    assert main(["retrieval", "--forum", str(tmp_path), "--questions", missing, "--out", str(tmp_path)]) == 2
    assert "questions file" in capsys.readouterr().err
    assert main(["retrieval", "--forum", str(tmp_path), "--configs", "bm25", "--out", str(tmp_path)]) == 2
