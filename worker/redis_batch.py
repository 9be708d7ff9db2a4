"""Concurrent callers' Redis commands, sent on one pipeline per event-loop turn (the webhook's Redis path).

A webhook delivery needs two Redis round trips: its dedupe keys (``SET NX EX``), then its enqueues
(dramatiq's ``dispatch`` script). On a 2-core machine the system calls and the client's work around
each round trip were most of a delivery's cost (docs/performance.md). So deliveries do not each send
their own: each hands its commands to one :class:`RedisBatcher`, and every command handed over during
one turn of the event loop leaves on one pipeline. With N deliveries in flight that is 2 round trips
for all N instead of 2N. Each caller gets its own commands' replies, in order, and sees its own
errors: a delivery is acked only after its own commands have answered.

At most ``turns`` pipelines are in flight at once (``limits.webhook_redis_connections``); a batch
that waits longer than ``wait_s`` for a turn fails with :class:`NoTurnError` (the webhook sheds those
deliveries with a 503). A command that runs a script by its SHA carries the script: when Redis has lost
its script cache (a restart, ``SCRIPT FLUSH``) the batcher loads it and sends those commands again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aredis_lib
from redis.exceptions import NoScriptError


@dataclass(frozen=True, slots=True)
class RedisCommand:
    """One Redis command; ``script`` is the Lua source of an ``EVALSHA``, to load it if Redis lost it."""

    args: tuple[Any, ...]
    script: bytes | str | None = None


class NoTurnError(Exception):
    """No pipeline turn within the wait: Redis is slower than the deliveries arrive."""


@dataclass(slots=True)
class _Waiting:
    commands: Sequence[RedisCommand]
    replies: asyncio.Future[list[Any]]


class RedisBatcher:
    """Sends the commands that callers of :meth:`run` hand over in one loop turn on one pipeline."""

    def __init__(self, redis: aredis_lib.Redis, *, turns: int, wait_s: float) -> None:
        if turns < 1:
            raise ValueError("turns must be at least 1")
        self._redis = redis
        self._turns = asyncio.Semaphore(turns)
        self._wait_s = wait_s
        self._waiting: list[_Waiting] = []
        self._flushing: set[asyncio.Task[None]] = set()  # a reference, so that no flush is collected

    async def run(self, commands: Sequence[RedisCommand]) -> list[Any]:
        """The replies to ``commands`` (in order), once their pipeline has answered. A command's error
        reply is raised here (the first one), never to another caller."""
        if not commands:
            return []
        loop = asyncio.get_running_loop()
        waiting = _Waiting(commands, loop.create_future())
        self._waiting.append(waiting)
        if len(self._waiting) == 1:  # the first of this batch starts its flush, which runs after this turn
            task = loop.create_task(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        replies = await waiting.replies
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _flush(self) -> None:
        try:
            async with asyncio.timeout(self._wait_s):
                await self._turns.acquire()
        except TimeoutError:
            batch, self._waiting = self._waiting, []
            for w in batch:
                _settle(w, exc=NoTurnError(f"no Redis turn within {self._wait_s:g} s"))
            return
        # Everything handed over while this flush waited for its turn leaves with it.
        # Those whose caller is gone (cancelled: the client hung up) are left out.
        batch = [w for w in self._waiting if not w.replies.done()]
        self._waiting = []
        try:
            replies = await self._send([c for w in batch for c in w.commands])
        except BaseException as exc:  # a connection error fails the whole pipeline: every caller sees it
            for w in batch:
                _settle(w, exc=exc if isinstance(exc, Exception) else ConnectionError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._turns.release()
        start = 0
        for w in batch:  # a caller cancelled meanwhile has its commands sent, and no one reads the replies
            _settle(w, replies=replies[start : start + len(w.commands)])
            start += len(w.commands)

    async def _send(self, commands: list[RedisCommand]) -> list[Any]:
        replies = await self._pipeline(commands)
        lost = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError) and commands[i].script]
        if lost:
            for script in {commands[i].script for i in lost}:
                if script is not None:
                    await self._redis.script_load(script)
            again = await self._pipeline([commands[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, commands: list[RedisCommand]) -> list[Any]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command.args)
            return list(await pipe.execute(raise_on_error=False))


def _settle(w: _Waiting, *, replies: list[Any] | None = None, exc: BaseException | None = None) -> None:
    if w.replies.done():
        return
    if exc is not None:
        w.replies.set_exception(exc)
    else:
        w.replies.set_result(replies or [])
