"""The reliability suite's short variant (``python -m eval.soak``, docs/reliability.md): a few dozen questions
through the whole stack on loopback — two worker processes, the catch-up poller, the webhook app behind a
storm relay — with one SIGKILL of a worker mid-job, a webhook storm (every delivery 1–3 times, shuffled,
some with a forged signature), dropped deliveries, the site settings unreadable (403, then 500) while the
workers start, and the API backfill killed mid-run; then the forum is reconciled against the questions."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from eval.soak.report import Row as AnswerRow
from eval.soak.report import stage_totals
from eval.soak.run import parse_faults
from eval.soak.workload import FAULT_NAMES
from tests.services import run_stack, unavailable

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = 30


def test_parse_faults_accepts_all_none_and_lists_and_refuses_unknown_names() -> None:
    import argparse

    assert parse_faults("all") == set(FAULT_NAMES)
    assert parse_faults("none") == set()
    assert parse_faults("kill, storm") == {"kill", "storm"}
    with pytest.raises(argparse.ArgumentTypeError, match="bogus"):
        parse_faults("kill,bogus")


def test_stage_totals_sum_each_stage_once_without_the_retrieval_envelope() -> None:
    trace = {
        "stages": [
            {"name": "embed", "duration_ms": 3.0},
            {"name": "retrieve_total", "duration_ms": 10.0},
            {"name": "generate", "duration_ms": 6.0},
        ],
        "post": {"duration_ms": 1.0},
    }
    rows = [
        AnswerRow("posted", 1, "webhook", 1, trace, None),
        AnswerRow("posted", 2, "poller", 1, trace, None),
    ]
    totals = stage_totals(rows)
    assert list(totals) == ["generate", "embed", "post"]
    assert totals["generate"] == {"sum_s": 0.012, "mean_ms": 6.0, "share": 0.6}
    assert totals["post"]["sum_s"] == 0.002


def test_short_soak_one_kill_one_storm_every_question_answered_exactly_once(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        unavailable("Redis", "redis-server is not installed")
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "eval.soak", "--questions", str(QUESTIONS),
        "--faults", "storm,kill,drop,settings,backfill",
        "--rate", "8", "--drain-timeout", "90", "--settle", "6", "--cache", str(tmp_path / "cache"),
        "--out", str(out),
    ]  # fmt: skip
    done = run_stack(command, cwd=ROOT, timeout_s=240)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no report (code {done.returncode}):\n{done.stderr[-3000:]}"
    report = json.loads(lines[-1])
    assert report["questions"] == QUESTIONS + 6  # the settings fault asks 3 in each of its windows
    assert report["duplicates"] == 0, report
    assert report["unanswered"] == 0, report
    assert report["pending"] == 0, report
    assert report["answered_once"] == report["questions"]
    assert report["silently_unanswered"] == 0, report
    assert done.returncode == 0, done.stderr[-3000:]
    # the storm happened, and every forged delivery was refused
    relay = report["relay"]
    assert relay["extra_copies"] > 0
    assert relay["forged"] > 0
    assert relay["forged_401"] == relay["forged"]
    assert relay["outcomes"].get("duplicate", 0) > 0  # repeated deliveries were recognised
    # the dropped deliveries were found by the catch-up poller
    assert report["forum_webhooks"].get("dropped", 0) > 0
    assert report["enqueued_by"].get("poller", 0) > 0
    # a worker was SIGKILLed in the middle of the run and restarted
    kills = [f for f in report["faults"] if f["fault"] == "kill"]
    assert kills, report["faults"]
    assert all(f["detail"].startswith("SIGKILL") for f in kills), report["faults"]
    assert all(f["never_answered"] == 0 for f in report["faults"])
    # the site settings were unreadable while a worker started (403, then 500): nothing was decided
    settings = [f for f in report["faults"] if f["fault"] == "settings"]
    assert settings, report["faults"]
    assert "FAILED" not in settings[0]["detail"], report["faults"]
    assert report["states"].get("skipped", 0) == 0, report["states"]
    # the API backfill was killed mid-run and run again: the vector index stayed valid throughout
    backfills = [f for f in report["faults"] if f["fault"] == "backfill"]
    assert backfills, report["faults"]
    assert "index then valid" in backfills[0]["detail"], report["faults"]
    assert report["fault_errors"] == [], report["fault_errors"]
    assert report["latency_p50_s"] > 0
    assert "generate" in report["stages"]
    assert "post" in report["stages"]
    saved = list(out.glob(f"soak-{QUESTIONS + 6}-*.json"))
    assert saved
    assert json.loads(saved[0].read_text())["duplicates"] == 0
