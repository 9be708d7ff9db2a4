from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis as redis_lib

from eval.stack.redis import RedisServer, redis_answers

pytestmark = pytest.mark.integration


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server binary not installed")
def test_private_redis_server_starts_answers_and_stops(tmp_path: Path) -> None:
    # The fallback the test session uses when no Redis answers on 6379.
    server = RedisServer(tmp_path / "redis")
    url = server.start()
    try:
        with redis_lib.Redis.from_url(url) as client:
            client.set("k", "v")
            assert client.get("k") == b"v"
    finally:
        server.stop()
    assert not redis_answers(url, timeout=0.2)
