from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import dramatiq
import pytest
import redis as redis_lib
import redis.asyncio as aredis_lib

from eval.stack.redis import RedisServer
from tests.conftest import REDIS_NAMESPACE, RedisClients, make_settings
from worker.broker import CitebotRedisBroker, build_broker
from worker.redis_batch import RedisBatcher

pytestmark = pytest.mark.integration


def test_message_round_trips_through_real_redis_to_a_real_worker(
    redis_url: str, redis_client: RedisClients
) -> None:
    settings = make_settings("postgresql://x@127.0.0.1/x", redis_url)
    broker = build_broker(settings.redis)
    seen: list[tuple[int, int]] = []

    @dramatiq.actor(broker=broker, queue_name="roundtrip", max_retries=0)
    def record(post_id: int, version: int) -> None:
        seen.append((post_id, version))

    record.send(42, 3)
    # The message really is in Redis before any worker runs.
    client = redis_client(redis_url)
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


def _consume(broker: dramatiq.Broker, queue: str) -> None:
    worker = dramatiq.Worker(broker, worker_timeout=100, worker_threads=2)
    worker.start()
    try:
        broker.join(queue, timeout=10_000)
        worker.join()
    finally:
        worker.stop()


def test_pipelined_sends_leave_together_and_a_real_worker_runs_them(
    redis_url: str, redis_client: RedisClients
) -> None:
    """Issue 18: the webhook's two messages of a delivery share one round trip."""
    broker = build_broker(make_settings("postgresql://x@127.0.0.1/x", redis_url).redis)
    seen: list[tuple[str, int]] = []

    @dramatiq.actor(broker=broker, queue_name="batched", max_retries=0)
    def record(kind: str, post_id: int) -> None:
        seen.append((kind, post_id))

    client = redis_client(redis_url)
    queue = f"{REDIS_NAMESPACE}-tasks:batched"
    with broker.pipelined():
        record.send("refresh", 7)
        record.send("question", 7)
        assert client.llen(queue) == 0  # nothing has left yet
    assert client.llen(queue) == 2

    # A block that raises sends nothing.
    def fails_after_one_send() -> None:
        with broker.pipelined():
            record.send("refresh", 8)
            raise RuntimeError("parse failed after the first send")

    with pytest.raises(RuntimeError, match="after the first send"):
        fails_after_one_send()
    assert client.llen(queue) == 2
    try:
        _consume(broker, "batched")
    finally:
        broker.close()
    assert sorted(seen) == [("question", 7), ("refresh", 7)]


def _send_collected(broker: CitebotRedisBroker, url: str, send: Callable[[], None]) -> None:
    """The webhook's way: the block's enqueues collected, then sent by a ``RedisBatcher``."""

    async def run() -> None:
        async with aredis_lib.Redis.from_url(url) as client:
            with broker.collected() as commands:
                send()
            await RedisBatcher(client, turns=1, wait_s=5.0).run(commands)

    asyncio.run(run())


def _send_pipelined(broker: CitebotRedisBroker, url: str, send: Callable[[], None]) -> None:
    with broker.pipelined():
        send()


@pytest.mark.parametrize("how", [_send_pipelined, _send_collected], ids=["pipelined", "collected"])
def test_batched_sends_survive_a_lost_script_cache(
    tmp_path: Path,
    how: Callable[[CitebotRedisBroker, str, Callable[[], None]], None],
    redis_client: RedisClients,
) -> None:
    """A Redis restart (or SCRIPT FLUSH) empties its script cache: the batch loads it and goes out,
    sent on the broker's own client (``pipelined``) or the webhook's way (issue 18: ``collected``)."""
    server = RedisServer(tmp_path / "redis")
    url = server.start()
    try:
        broker = build_broker(make_settings("postgresql://x@127.0.0.1/x", url).redis)
        seen: list[int] = []

        @dramatiq.actor(broker=broker, queue_name="flushed", max_retries=0)
        def record(post_id: int) -> None:
            seen.append(post_id)

        record.send(1)  # loads the script the ordinary way
        client = redis_client(url)
        client.script_flush()

        def two() -> None:
            record.send(2)
            record.send(3)

        how(broker, url, two)
        assert client.llen(f"{REDIS_NAMESPACE}-tasks:flushed") == 3
        try:
            _consume(broker, "flushed")
        finally:
            broker.close()
        assert sorted(seen) == [1, 2, 3]
    finally:
        server.stop()


def test_closing_the_broker_closes_its_connections(tmp_path: Path, redis_client: RedisClients) -> None:
    """dramatiq's ``RedisBroker.close`` left the broker's sockets open (found by a garbage collection
    after each test, with ResourceWarning an error); a private server counts its clients exactly."""
    server = RedisServer(tmp_path / "redis")
    url = server.start()
    try:
        counter = redis_client(url)
        broker = build_broker(make_settings("postgresql://x@127.0.0.1/x", url).redis)

        @dramatiq.actor(broker=broker, queue_name="closing", max_retries=0)
        def record(post_id: int) -> None:
            del post_id

        record.send(1)
        assert _connected(counter) == 2  # the broker's connection and this one
        broker.close()
        deadline = time.monotonic() + 5
        while _connected(counter) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _connected(counter) == 1
        record.send(2)  # a closed broker reconnects for a later send
        assert counter.llen(f"{REDIS_NAMESPACE}-tasks:closing") == 2
        broker.close()
    finally:
        server.stop()


def _connected(client: redis_lib.Redis) -> int:
    return int(client.info("clients")["connected_clients"])
