"""Every entry point checks the database, its schema, the index's model and Redis before it starts, and
says what is wrong in one line (real processes, real PostgreSQL and Redis)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.stack.redis import free_port
from tests.conftest import REDIS_NAMESPACE
from tests.eval.forum.export import write_export

pytestmark = pytest.mark.integration

ENTRY_POINTS = {
    "worker": ["worker", "run", "--threads", "1"],
    "poll": ["poll", "--once"],
    "ask": ["ask", "how do I fix the shader precision error?", "--no-gate"],
    "backfill": ["backfill", "--source", "file", "--path", "{export}"],
}


def run_citebot(
    args: list[str], env: dict[str, str], timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """The CLI as a process; a worker that starts instead of refusing is killed at the timeout."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "worker.app.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"citebot {' '.join(args)} did not stop: {exc.stderr!r}") from exc


def base_env(db_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")},
        "CITEBOT_DATABASE__URL": db_url,
        "CITEBOT_DATABASE__CONNECT_TIMEOUT_S": "2",
        "CITEBOT_REDIS__URL": redis_url,
        "CITEBOT_REDIS__NAMESPACE": REDIS_NAMESPACE,
        "CITEBOT_EMBEDDINGS__PROVIDER": "tei",
        "CITEBOT_EMBEDDINGS__BASE_URL": "http://127.0.0.1:9",
        "CITEBOT_EMBEDDINGS__MODEL": "test-model",
        "CITEBOT_EMBEDDINGS__DIMENSION": "8",
        "CITEBOT_DISCOURSE__BASE_URL": "http://127.0.0.1:9",
        **extra,
    }


def argv(name: str, tmp_path: Path) -> list[str]:
    export = str(write_export(tmp_path / "export"))
    return [a.replace("{export}", export) for a in ENTRY_POINTS[name]]


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_a_model_mismatch_is_refused_at_start_naming_each_side(
    name: str, db_url: str, redis_url: str, tmp_path: Path
) -> None:
    # The test database was migrated for test-model (8-d); this process is configured for bge-m3.
    env = base_env(
        db_url, redis_url, CITEBOT_EMBEDDINGS__MODEL="BAAI/bge-m3", CITEBOT_EMBEDDINGS__DIMENSION="1024"
    )
    proc = run_citebot(argv(name, tmp_path), env)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("citebot:")]
    assert len(lines) == 1, proc.stderr
    assert "the post index holds test-model (8-d) vectors (index_meta)" in lines[0]
    assert "configured for BAAI/bge-m3 (1024-d: CITEBOT_EMBEDDINGS__MODEL" in lines[0]
    assert "worker started" not in proc.stderr


@pytest.mark.parametrize("name", ["worker", "poll", "ask"])
def test_database_down_missing_or_not_migrated_is_one_line_naming_the_next_step(
    name: str, db_url: str, empty_db_url: str, redis_url: str, tmp_path: Path
) -> None:
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/citebot"
    missing = db_url.replace("/citebot_", "/nosuchdb_", 1)
    cases = {
        down: "PostgreSQL is not reachable on 127.0.0.1:",
        missing: "does not exist on",
        empty_db_url: "has no citebot schema yet: run `citebot db migrate`",
    }
    for url, expected in cases.items():
        proc = run_citebot(argv(name, tmp_path), base_env(url, redis_url), timeout_s=30)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr  # one line, no pool warnings, no traceback
        assert expected in proc.stderr, proc.stderr
    assert (
        "then run `citebot db migrate`"
        in run_citebot(argv(name, tmp_path), base_env(missing, redis_url)).stderr
    )


@pytest.mark.parametrize("name", ["worker", "poll"])
def test_redis_down_stops_the_worker_and_the_poller_before_they_start(
    name: str, db_url: str, tmp_path: Path
) -> None:
    proc = run_citebot(argv(name, tmp_path), base_env(db_url, f"redis://127.0.0.1:{free_port()}/0"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("citebot: error: redis: Redis is not reachable on 127.0.0.1:"), proc.stderr
    assert "(connection refused)" in proc.stderr
    assert "start it, or fix CITEBOT_REDIS__URL" in proc.stderr
    assert "worker started" not in proc.stderr
