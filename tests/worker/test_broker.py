from __future__ import annotations

import dramatiq
import pytest
import redis as redis_lib

from tests.conftest import REDIS_NAMESPACE, make_settings
from worker.broker import build_broker

pytestmark = pytest.mark.integration


def test_message_round_trips_through_real_redis_to_a_real_worker(redis_url: str) -> None:
    settings = make_settings("postgresql://x@127.0.0.1/x", redis_url)
    broker = build_broker(settings.redis)
    seen: list[tuple[int, int]] = []

    @dramatiq.actor(broker=broker, queue_name="roundtrip", max_retries=0)
    def record(post_id: int, version: int) -> None:
        seen.append((post_id, version))

    record.send(42, 3)
    # The message really is in Redis before any worker runs.
    client = redis_lib.Redis.from_url(redis_url)
    assert client.llen(f"{REDIS_NAMESPACE}-tasks:roundtrip") == 1
    worker = dramatiq.Worker(broker, worker_timeout=100, worker_threads=2)
    worker.start()
    try:
        broker.join("roundtrip", timeout=10_000)
        worker.join()
    finally:
        worker.stop()
        broker.close()
    assert seen == [(42, 3)]
    assert client.llen(f"{REDIS_NAMESPACE}-tasks:roundtrip") == 0
