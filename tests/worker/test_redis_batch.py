"""Issue 18: concurrent deliveries' Redis work shares pipelines, each caller gets its own replies and
errors, and the webhook app's enqueues leave on its asyncio client with nothing lost."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import redis as redis_lib
import redis.asyncio as aredis_lib
from redis.exceptions import ResponseError

from tests.conftest import REDIS_NAMESPACE, make_settings
from tests.worker.webhook_support import SECRET, encode, headers, post_payload
from worker.actors import INDEX_QUEUE, QUESTIONS_QUEUE, DramatiqIntake, declare_actors, enqueue_only
from worker.app.webhook import create_app
from worker.broker import build_broker
from worker.redis_batch import NoTurnError, RedisBatcher, RedisCommand
from worker.webhook_events import WEBHOOK_PATH

pytestmark = pytest.mark.integration


class CountingRedis(aredis_lib.Redis):
    """The asyncio client, counting the pipelines it is asked for (each one is one round trip)."""

    pipelines = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.pipelines += 1
        return super().pipeline(*args, **kwargs)


def test_one_turn_of_callers_shares_one_pipeline_and_keeps_its_own_replies(redis_url: str) -> None:
    async def run() -> tuple[list[Any], int]:
        async with CountingRedis.from_url(redis_url) as client:
            batcher = RedisBatcher(client, turns=4, wait_s=5.0)
            key = f"{REDIS_NAMESPACE}:batch:{{}}"
            calls = [
                batcher.run(
                    [RedisCommand(("SET", key.format(i), str(i))), RedisCommand(("GET", key.format(i)))]
                )
                for i in range(20)
            ]
            replies = await asyncio.gather(*calls)
        return replies, client.pipelines

    replies, pipelines = asyncio.run(run())
    assert pipelines == 1
    assert replies == [[True, str(i).encode()] for i in range(20)]


def test_an_error_reply_reaches_only_its_own_caller(redis_url: str) -> None:
    async def run() -> list[Any]:
        async with aredis_lib.Redis.from_url(redis_url) as client:
            await client.set(f"{REDIS_NAMESPACE}:batch:text", "not a number")
            batcher = RedisBatcher(client, turns=1, wait_s=5.0)
            good = batcher.run([RedisCommand(("INCR", f"{REDIS_NAMESPACE}:batch:n"))])
            bad = batcher.run([RedisCommand(("INCR", f"{REDIS_NAMESPACE}:batch:text"))])
            return await asyncio.gather(good, bad, return_exceptions=True)

    good, bad = asyncio.run(run())
    assert good == [1]
    assert isinstance(bad, ResponseError)


def test_no_turn_in_time_is_a_no_turn_error(redis_url: str) -> None:
    async def run() -> BaseException | None:
        async with aredis_lib.Redis.from_url(redis_url) as client:
            batcher = RedisBatcher(client, turns=1, wait_s=0.05)
            command = RedisCommand(("BLPOP", f"{REDIS_NAMESPACE}:none", "0.5"))
            slow = asyncio.create_task(batcher.run([command]))
            await asyncio.sleep(0.01)  # the slow one holds the only turn
            try:
                await batcher.run([RedisCommand(("PING",))])
            except NoTurnError as exc:
                caught: BaseException | None = exc
            else:
                caught = None
            await slow
        return caught

    assert isinstance(asyncio.run(run()), NoTurnError)


def test_concurrent_deliveries_share_round_trips_and_none_is_lost(redis_url: str) -> None:
    """40 question deliveries at once: every one is queued (a refresh and a question each), on far
    fewer round trips than one per delivery, all on the app's asyncio client. Before, each delivery
    sent its own dedupe pipeline (40) and its enqueues on the broker's blocking client."""
    settings = make_settings(
        "postgresql://x@127.0.0.1/x",
        redis_url,
        discourse={"webhook_secret": SECRET, "bot_username": "citebot"},
    )
    broker = build_broker(settings.redis)
    intake = DramatiqIntake(declare_actors(broker, enqueue_only, settings.limits))
    client = CountingRedis.from_url(redis_url)
    app = create_app(settings, intake, client)
    payloads = [post_payload(id=9_100_000 + i) for i in range(40)]

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)  # runs no lifespan: the app's client is closed here
        async with client, httpx.AsyncClient(transport=transport, base_url="http://webhook.test") as c:
            calls = []
            for p in payloads:
                body = encode(p)
                calls.append(c.post(WEBHOOK_PATH, content=body, headers=headers(body, "post_created")))
            return list(await asyncio.gather(*calls))

    try:
        responses = asyncio.run(run())
    finally:
        broker.close()
    assert [r.json()["outcome"] for r in responses] == ["enqueued"] * 40
    with redis_lib.Redis.from_url(redis_url) as r:
        assert r.llen(f"{REDIS_NAMESPACE}-tasks:{QUESTIONS_QUEUE}") == 40
        assert r.llen(f"{REDIS_NAMESPACE}-tasks:{INDEX_QUEUE}") == 40
    assert client.pipelines <= 20, f"{client.pipelines} round trips for 40 deliveries"
