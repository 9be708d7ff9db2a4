"""``citebot worker run`` as a real process: consumes the queue, several processes, clean stop on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import psycopg
import pytest

from eval.stack.redis import free_port
from tests.conftest import REDIS_NAMESPACE, make_settings
from worker.actors import declare_actors
from worker.broker import build_broker
from worker.runtime import Runtime

pytestmark = pytest.mark.integration


def test_worker_run_with_two_processes_answers_and_stops(db_url: str, redis_url: str) -> None:
    env = {
        **os.environ,
        "CITEBOT_DATABASE__URL": db_url,
        "CITEBOT_REDIS__URL": redis_url,
        "CITEBOT_REDIS__NAMESPACE": REDIS_NAMESPACE,
        "CITEBOT_EMBEDDINGS__MODEL": "test-model",
        "CITEBOT_EMBEDDINGS__DIMENSION": "8",
        # No forum answers on these ports: the flags cannot be read (a 5xx-like outage, not a 403).
        "CITEBOT_EMBEDDINGS__PROVIDER": "tei",
        "CITEBOT_EMBEDDINGS__BASE_URL": "http://127.0.0.1:9",
        "CITEBOT_DISCOURSE__BASE_URL": "http://127.0.0.1:9",
    }
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker.app.cli",
            "worker",
            "run",
            "--threads",
            "1",
            "--processes",
            "2",
            "--metrics-port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(line.decode() for line in proc.stdout or []), daemon=True
    )
    reader.start()
    deadline = time.monotonic() + 60
    while sum("worker started" in line for line in list(lines)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    settings = make_settings(db_url, redis_url)
    broker = build_broker(settings.redis)

    def runtime() -> Runtime:
        raise AssertionError("this process only sends")

    actors = declare_actors(broker, runtime, settings.limits)
    try:
        for post_id in range(900, 906):
            actors.answer_question.send(post_id, 1, 1)
        deadline = time.monotonic() + 60
        rows: list[tuple[int, str]] = []
        while time.monotonic() < deadline:
            with psycopg.connect(db_url) as conn:
                rows = [(int(r[0]), str(r[1])) for r in conn.execute("SELECT post_id, state FROM answers")]
            if len(rows) == 6 and all(state != "queued" for _, state in rows):
                break
            time.sleep(0.2)
        # Every question reached the real answer pipeline, which could not read the flags (no forum):
        # held, not decided on a guess, and nothing posted (issue 33, finding 1).
        assert sorted(rows) == [(p, "held") for p in range(900, 906)]
        # Each process serves its own Prometheus metrics (the parent on port, the child on port + 1).
        held = 0.0
        for p in (port, port + 1):
            text = httpx.get(f"http://127.0.0.1:{p}/metrics", timeout=5).text
            held += sum(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith('citebot_unanswered_total{reason="settings_unreadable",state="held"}')
            )
        assert held == 6  # once per question, however often it is retried
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
        broker.close()
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert output.count("worker started") == 2  # the parent and its child
