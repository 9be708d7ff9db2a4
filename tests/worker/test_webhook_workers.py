"""Issue 18: ``citebot webhook serve --workers 2`` serves signed deliveries from two processes on one
port, each with its own Redis pool, and queues every accepted one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from eval.stack.redis import free_port
from tests.conftest import REDIS_NAMESPACE
from tests.worker.webhook_support import SECRET, encode, headers, post_payload
from worker.actors import QUESTIONS_QUEUE
from worker.webhook_events import WEBHOOK_PATH

pytestmark = pytest.mark.integration


def test_two_server_processes_share_the_port_and_lose_nothing(redis_url: str) -> None:
    port = free_port()
    env = {
        **os.environ,
        "CITEBOT_REDIS__URL": redis_url,
        "CITEBOT_REDIS__NAMESPACE": REDIS_NAMESPACE,
        "CITEBOT_DISCOURSE__WEBHOOK_SECRET": SECRET,
        "CITEBOT_DISCOURSE__BOT_USERNAME": "citebot",
    }
    command = [
        sys.executable,
        "-m",
        "worker.app.cli",
        "webhook",
        "serve",
        "--port",
        str(port),
        "--workers",
        "2",
    ]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, f"the server exited with {server.returncode}"
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.2)
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
        assert len(children) >= 2, children  # the two workers (uvicorn's supervisor is the parent)
        outcomes = []
        with httpx.Client(base_url=base, timeout=10) as client:
            for i in range(20):
                body = encode(post_payload(id=9_200_000 + i))
                r = client.post(WEBHOOK_PATH, content=body, headers=headers(body))
                outcomes.append(r.json()["outcome"])
    finally:
        server.terminate()
        server.wait(20)
    assert outcomes == ["enqueued"] * 20
    with redis_lib.Redis.from_url(redis_url) as client:  # closed here: an open socket fails the session
        assert client.llen(f"{REDIS_NAMESPACE}-tasks:{QUESTIONS_QUEUE}") == 20
