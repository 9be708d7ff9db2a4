"""``python -m eval.bench webhook_costs``: where a webhook delivery's CPU time goes, part by part.

Each part of the ack path is run alone ``--n`` times in this process against a ``redis-server`` of
its own, and timed in CPU time (``time.process_time``: this process's user + system time, so the
system calls of a Redis round trip count, and the neighbours' load much less than in wall time) and
in wall time: the signature check, the payload parse, the addressing decision, the dedupe keys'
round trip (asyncio client, one delivery alone), and the two enqueues of a question delivery — sent
one by one (before issue 18's first session) and together in one round trip
(``CitebotRedisBroker.pipelined``). Then a whole delivery's Redis work as the app does it now (dedupe
keys, then the collected enqueues, both through ``worker.redis_batch.RedisBatcher`` on the asyncio
client), with deliveries one at a time and ``--width`` at a time sharing their pipelines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis.asyncio as aredis_lib

from eval.bench.report import emit, print_table
from eval.bench.webhook import SECRET, delivery
from eval.stack.redis import RedisServer
from worker.actors import DramatiqIntake, declare_actors, enqueue_only
from worker.addressing import BotIdentity, decide
from worker.broker import build_broker
from worker.redis_batch import RedisBatcher, RedisCommand
from worker.settings import Settings
from worker.webhook_events import PostEnvelope, sign, signature_ok


def _timed(n: int, run: Callable[[int], object]) -> tuple[float, float]:
    """CPU and wall microseconds per call of ``run(i)``, i in 0..n-1."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        run(i)
    return 1e6 * (time.process_time() - cpu) / n, 1e6 * (time.perf_counter() - wall) / n


def _dedupe(url: str, n: int) -> tuple[float, float]:
    async def go() -> tuple[float, float]:
        client = aredis_lib.Redis.from_url(url)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(f"bench:d:{i}", b"1", nx=True, ex=60)
                pipe.set(f"bench:q:{i}", b"1", nx=True, ex=60)
                await pipe.execute()
        out = 1e6 * (time.process_time() - cpu) / n, 1e6 * (time.perf_counter() - wall) / n
        await client.aclose()
        return out

    return asyncio.run(go())


def _delivery_redis(url: str, intake: DramatiqIntake, n: int, width: int) -> tuple[float, float]:
    """CPU and wall µs per delivery of the app's Redis work (dedupe keys, then the two enqueues),
    ``width`` deliveries at a time on one ``RedisBatcher``."""

    async def one(batcher: RedisBatcher, i: int) -> None:
        keys = (f"bench:w{width}:d:{i}", f"bench:w{width}:q:{i}")
        await batcher.run([RedisCommand(("SET", k, b"1", "NX", "EX", 60)) for k in keys])
        with intake.outbox() as commands:
            intake.refresh_post(i + 1, "post_created")
            intake.question(i + 1, 5, 1)
        await batcher.run(commands)

    async def go() -> tuple[float, float]:
        client = aredis_lib.Redis.from_url(url)
        batcher = RedisBatcher(client, turns=64, wait_s=10.0)
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, n, width):
            await asyncio.gather(*(one(batcher, i) for i in range(start, min(n, start + width))))
        out = 1e6 * (time.process_time() - cpu) / n, 1e6 * (time.perf_counter() - wall) / n
        await client.aclose()
        return out

    return asyncio.run(go())


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.bench webhook_costs", description=__doc__)
    ap.add_argument("--n", type=int, default=3000, help="calls per part (default 3000)")
    ap.add_argument("--width", type=int, default=8, help="deliveries in flight at once (default 8)")
    args = ap.parse_args(list(argv))
    n = args.n
    bodies = [delivery(20_000_000 + i).partition(b"\r\n\r\n")[2] for i in range(n)]
    signatures = [sign(SECRET.encode(), b) for b in bodies]
    posts = [PostEnvelope.model_validate_json(b).post for b in bodies]
    bot = BotIdentity(username="citebot", user_id=None, answer_pms=False)
    rows: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="citebot-bench-") as tmp:
        server = RedisServer(Path(tmp) / "redis")
        url = server.start()
        try:
            settings = Settings.model_validate({"redis": {"url": url, "namespace": "bench"}})
            broker = build_broker(settings.redis)
            intake = DramatiqIntake(declare_actors(broker, enqueue_only, settings.limits))
            intake.refresh_post(1, "post_created")  # declares the queues, loads the script

            def one_by_one(i: int) -> None:
                intake.refresh_post(i + 1, "post_created")
                intake.question(i + 1, 5, 1)

            def together(i: int) -> None:
                with broker.pipelined():
                    intake.refresh_post(i + 1, "post_created")
                    intake.question(i + 1, 5, 1)

            rows["signature (HMAC-SHA256)"] = _timed(
                n, lambda i: signature_ok(SECRET.encode(), bodies[i], signatures[i])
            )
            rows["payload parse (pydantic)"] = _timed(
                n, lambda i: PostEnvelope.model_validate_json(bodies[i])
            )
            rows["addressing (to_domain + decide)"] = _timed(n, lambda i: decide(posts[i].to_domain(), bot))
            rows["dedupe keys, 1 round trip (asyncio)"] = _dedupe(url, n)
            # Alternated, so that both see the same neighbours.
            before, after = [], []
            for _ in range(3):
                before.append(_timed(n // 3, one_by_one))
                after.append(_timed(n // 3, together))
            rows["2 enqueues, 2 round trips (before)"] = _median(before)
            rows["2 enqueues, 1 round trip (pipelined)"] = _median(after)
            alone, shared = [], []
            for _ in range(3):
                alone.append(_delivery_redis(url, intake, n // 3, 1))
                shared.append(_delivery_redis(url, intake, n // 3, args.width))
            rows["a delivery's Redis work, 1 at a time (batcher)"] = _median(alone)
            rows[f"a delivery's Redis work, {args.width} at a time (batcher)"] = _median(shared)
            broker.close()
        finally:
            server.stop()
    load = round(os.getloadavg()[0], 2)
    print(f"webhook ack path, part by part, {n} calls each, load average {load}")
    print_table(["part", "CPU µs", "wall µs"], [[k, c, w] for k, (c, w) in rows.items()])
    emit(
        "webhook_costs",
        {
            "n": n,
            "parts": {k: {"cpu_us": round(c, 1), "wall_us": round(w, 1)} for k, (c, w) in rows.items()},
            "load_average": load,
            "cpus": os.cpu_count(),
        },
    )
    return 0


def _median(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    cpu = sorted(c for c, _ in pairs)[len(pairs) // 2]
    wall = sorted(w for _, w in pairs)[len(pairs) // 2]
    return cpu, wall
