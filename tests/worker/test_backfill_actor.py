"""The scheduled backfill: ``citebot backfill --enqueue`` → Redis → a real worker runs ``backfill_tick``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dramatiq
import psycopg
import pytest

from eval.stack.launcher import serve
from tests.conftest import REDIS_NAMESPACE, make_settings
from tests.eval.forum.export import write_export
from worker.actors import declare_actors
from worker.app.assemble import lazy_runtime
from worker.broker import build_broker
from worker.testing.server import ModelDouble

pytestmark = pytest.mark.integration


def test_enqueued_backfill_runs_on_a_worker_and_fills_the_index(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    export = write_export(tmp_path / "export")
    with serve(ModelDouble(model="test-model").app) as tei_url:
        embeddings = {"provider": "tei", "base_url": tei_url, "model": "test-model", "dimension": 8}
        settings = make_settings(db_url, redis_url, embeddings=embeddings)
        env = {
            **os.environ,
            "CITEBOT_REDIS__URL": redis_url,
            "CITEBOT_REDIS__NAMESPACE": REDIS_NAMESPACE,
            "CITEBOT_DATABASE__URL": db_url,
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "worker.app.cli",
                "backfill",
                "--source",
                "file",
                "--path",
                str(export),
                "--enqueue",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "enqueued" in proc.stdout
        broker = build_broker(settings.redis)

        runtime = lazy_runtime(settings)  # the worker's runtime: its indexer runs the backfill
        declare_actors(broker, runtime, settings.limits)
        worker = dramatiq.Worker(broker, worker_timeout=100, worker_threads=1)
        worker.start()
        try:
            broker.join("maintenance", timeout=60_000)
            worker.join()
        finally:
            worker.stop()
            broker.close()
            runtime.close()
    with psycopg.connect(db_url) as conn:
        indexed = conn.execute("SELECT count(*) FROM post_index").fetchone()
        state = conn.execute("SELECT status FROM backfill_state").fetchone()
    assert indexed is not None
    assert indexed[0] == 5  # every post of the three exported topics but topic 12's open question
    assert state == ("done",)
