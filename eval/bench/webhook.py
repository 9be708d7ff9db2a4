"""``python -m eval.bench webhook``: signed webhook deliveries per second and ack latency.

The webhook app runs as ``citebot webhook serve`` (uvicorn) in a child process on loopback, against a
Redis of its own (a ``redis-server`` child, unless ``--redis-url``). The load generator is a small
HTTP/1.1 client on keep-alive connections (``--concurrency`` of them), sending pre-signed
``post_created`` deliveries, each a distinct post that mentions the bot (so every one is verified,
parsed, addressed, deduped and enqueued). On 2 cores the generator, Redis and the server share the
CPUs, so the generator's own cost caps the figure: ``--clients lean,streams`` (the default) measures
with both in one run, ``lean`` (an ``asyncio.Protocol`` on uvloop, the headline figures) and
``streams`` (asyncio streams, the generator before issue 18's third session), and reports each one's
CPU per request. Reference in the same run: ``GET /healthz`` with the same generator — the
framework's floor — reported as a ratio. Afterwards the bench checks that nothing was
lost: the queue holds exactly one message per accepted delivery.

Burst mode (issue 13): with ``--concurrency`` above ``--baseline-concurrency`` (8), the same run also
sends the deliveries over that many concurrent connections at once (``--concurrency 1000``) and
counts refusals (any answer but 200), beside the normal figures at the baseline concurrency. Each run
also posts issue 13's backtick reproducer and its 32,000-character variant while a second connection
polls ``/healthz``: their ack time and the slowest ``/healthz`` are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis as redis_lib

from eval.bench.report import emit, print_table
from eval.stack.redis import RedisServer, free_port
from worker.webhook_events import WEBHOOK_PATH, sign

SECRET = "bench-webhook-secret"  # noqa: S105 - a throwaway secret for a loopback bench
TARGET_RPS = 1500.0
TARGET_P99_MS = 25.0
_T = TypeVar("_T")


def delivery(post_id: int) -> bytes:
    """One signed ``post_created`` request, as Discourse sends it."""
    body = json.dumps(
        {
            "post": {
                "id": post_id,
                "name": "Member",
                "username": "member",
                "created_at": "2024-05-01T10:00:00.000Z",
                "cooked": '<p><a class="mention" href="/u/citebot">@citebot</a> how do I enable shadows on a '
                "directional light?</p>\n<pre><code>light.castShadows = true\n</code></pre>",
                "post_number": 2,
                "post_type": 1,
                "updated_at": "2024-05-01T10:00:00.000Z",
                "reply_to_post_number": None,
                "topic_id": 4242,
                "topic_slug": "shadows",
                "topic_title": "Shadows",
                "category_id": 10,
                "category_slug": "support",
                "topic_archetype": "regular",
                "user_id": 77,
                "hidden": False,
                "deleted_at": None,
                "user_deleted": False,
                "version": 1,
                "raw": "@citebot how do I enable shadows on a directional light?\n\n"
                "```\nlight.castShadows = true\n```",
                "reply_to_user": None,
            }
        }
    ).encode()
    head = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Discourse-Instance: http://forum.local\r\n"
        f"X-Discourse-Event-Id: {post_id}\r\nX-Discourse-Event-Type: post\r\n"
        "X-Discourse-Event: post_created\r\n"
        f"X-Discourse-Event-Signature: {sign(SECRET.encode(), body)}\r\n\r\n"
    )
    return head.encode() + body


REPRODUCERS = {
    "8k": "@someone " + "`" * 320 + "a`" * 4000,
    "32k": "@someone " + "`" * 1280 + "a`" * 15_300,
}


def hostile_delivery(post_id: int, raw: str) -> bytes:
    """A signed ``post_created`` whose raw is ``raw`` (and cooked its escaped paragraph)."""
    import html

    request = delivery(post_id)
    head, _, body = request.partition(b"\r\n\r\n")
    payload = json.loads(body)
    payload["post"]["raw"] = raw + "\n\n@citebot why?"
    mention = '<a class="mention" href="/u/citebot">@citebot</a>'
    payload["post"]["cooked"] = f"<p>{html.escape(raw)}</p>\n<p>{mention} why?</p>"
    new_body = json.dumps(payload).encode()
    lines = [
        line
        for line in head.decode().split("\r\n")
        if not line.lower().startswith(("content-length:", "x-discourse-event-signature:"))
    ]
    lines += [
        f"Content-Length: {len(new_body)}",
        f"X-Discourse-Event-Signature: {sign(SECRET.encode(), new_body)}",
    ]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + new_body


async def _hostile(port: int, requests: list[bytes]) -> dict[str, float]:
    """Ack time of each hostile delivery, and the slowest /healthz polled meanwhile on another connection."""
    acks: list[float] = []
    health: list[float] = []
    statuses: list[int] = []
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            await _connection(port, [healthz()], [0], health, [])
            await asyncio.sleep(0.001)

    poller = asyncio.create_task(poll())
    for request in requests:
        await _connection(port, [request], [0], acks, statuses)
    done.set()
    await poller
    return {
        "ack_max_ms": 1000 * max(acks),
        "healthz_max_ms": 1000 * max(health, default=0.0),
        "healthz_polls": len(health),
        "ok": sum(1 for s in statuses if s == 200),
    }


def healthz() -> bytes:
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def _connection(
    port: int, requests: list[bytes], cursor: list[int], latencies: list[float], statuses: list[int]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while True:
            i = cursor[0]
            if i >= len(requests):
                return
            cursor[0] = i + 1
            started = time.perf_counter()
            writer.write(requests[i])
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            statuses.append(status)
    finally:
        writer.close()


class _LeanConnection(asyncio.Protocol):
    """One keep-alive connection of the lean generator: writes a request, parses the answer's head in
    the transport's callback (no coroutine, no stream reader per request), writes the next."""

    def __init__(self, shared: _Shared) -> None:
        self.shared = shared
        self.buffer = b""
        self.need = -1  # bytes of the whole answer, once its head is in
        self.started = 0.0
        self.status = 0
        self.transport: asyncio.Transport = None  # type: ignore[assignment] # set on connection_made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        s = self.shared
        if s.cursor >= len(s.requests):
            self.transport.close()
            return
        request = s.requests[s.cursor]
        s.cursor += 1
        self.started = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.need < 0:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = self.buffer[:end]
                self.status = int(head[9:12])
                at = head.lower().find(b"content-length:")
                length = int(head[at + 15 : head.index(b"\r\n", at)]) if at >= 0 else 0
                self.need = end + 4 + length
            if len(self.buffer) < self.need:
                return
            self.buffer = self.buffer[self.need :]
            self.need = -1
            self.shared.latencies.append(time.perf_counter() - self.started)
            self.shared.statuses.append(self.status)
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.shared.closed += 1
        if self.shared.closed == self.shared.connections and not self.shared.done.done():
            self.shared.done.set_result(None)


@dataclass
class _Shared:
    requests: list[bytes]
    connections: int
    done: asyncio.Future[None]
    cursor: int = 0
    closed: int = 0
    latencies: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


async def _lean_load(
    port: int, requests: list[bytes], concurrency: int
) -> tuple[float, list[float], list[int]]:
    loop = asyncio.get_running_loop()
    shared = _Shared(requests, concurrency, loop.create_future())
    started = time.perf_counter()
    for _ in range(concurrency):
        await loop.create_connection(lambda: _LeanConnection(shared), "127.0.0.1", port)
    await shared.done
    return time.perf_counter() - started, shared.latencies, shared.statuses


async def _load(port: int, requests: list[bytes], concurrency: int) -> tuple[float, list[float], list[int]]:
    cursor = [0]
    latencies: list[float] = []
    statuses: list[int] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(_connection(port, requests, cursor, latencies, statuses) for _ in range(concurrency))
    )
    return time.perf_counter() - started, latencies, statuses


CLIENTS = {"lean": _lean_load, "streams": _load}


def _run(main: Coroutine[Any, Any, _T], client: str) -> _T:
    """The lean generator on uvloop when installed (the server's loop too), the streams one on asyncio."""
    if client == "lean" and importlib.util.find_spec("uvloop"):
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def _with_children(pids: Sequence[int]) -> list[int]:
    """The processes and their children (a ``--workers`` server's processes; Linux ``/proc``)."""
    out = list(pids)
    for pid in pids:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            continue
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes and their children have used so far (Linux ``/proc``;
    0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0.0
    for pid in _with_children(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_load(
    port: int, requests: list[bytes], concurrency: int, pids: Sequence[int] = (), client: str = "lean"
) -> dict[str, float]:
    """Send ``requests`` with the ``client`` generator; with ``pids`` (the server, Redis), also their
    CPU time per request: on a loaded machine the throughput swings with the neighbours, the CPU a
    request costs much less. The generator's own CPU per request is reported too (``client_cpu_us``):
    on 2 cores it competes with the server and Redis, so a heavy one lowers the figure."""
    cpu_before = cpu_seconds(pids)
    redis_before = cpu_seconds(pids[1:])  # the server first, then Redis (when it is the bench's own)
    own_before = time.process_time()
    elapsed, latencies, statuses = _run(CLIENTS[client](port, requests, concurrency), client)
    own = time.process_time() - own_before
    cpu = cpu_seconds(pids) - cpu_before
    redis_cpu = cpu_seconds(pids[1:]) - redis_before
    ordered = sorted(latencies)
    return {
        "cpu_us": 1e6 * cpu / max(1, len(latencies)),
        "redis_cpu_us": 1e6 * redis_cpu / max(1, len(latencies)),
        "client_cpu_us": 1e6 * own / max(1, len(latencies)),
        "requests": len(latencies),
        "ok": sum(1 for s in statuses if s == 200),
        "refused": sum(1 for s in statuses if s != 200),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "max_ms": 1000 * ordered[-1],
    }


def _server_stack() -> str:
    """The event loop and HTTP parser uvicorn picks here ("auto" prefers uvloop and httptools)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"{loop} + {http}"


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"webhook server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("webhook server did not become ready")


def _summary(new: dict[str, float], ref: dict[str, float]) -> dict[str, float]:
    """A generator's figures: its deliveries against its own ``/healthz`` reference."""
    return {
        "deliveries_per_s": round(new["rps"], 1),
        "ack_p50_ms": round(new["p50_ms"], 2),
        "ack_p99_ms": round(new["p99_ms"], 2),
        "healthz_per_s": round(ref["rps"], 1),
        "server_cpu_us_per_delivery": round(new["cpu_us"], 1),
        "redis_cpu_us_per_delivery": round(new["redis_cpu_us"], 1),
        "client_cpu_us_per_delivery": round(new["client_cpu_us"], 1),
    }


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.bench webhook", description=__doc__)
    parser.add_argument(
        "--deliveries", type=int, default=20_000, help="signed deliveries to send (default 20000)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="keep-alive connections (default 8)")
    parser.add_argument(
        "--baseline-concurrency",
        type=int,
        default=8,
        help="the normal figures' connections; a higher --concurrency adds a burst phase (default 8)",
    )
    parser.add_argument(
        "--clients",
        default="lean,streams",
        help="load generators, comma-separated, each measured in the same run; the first gives the "
        "headline figures (lean: asyncio protocol on uvloop; streams: asyncio streams, the one before)",
    )
    parser.add_argument(
        "--server-workers", type=int, default=1, help="server processes (citebot webhook serve --workers)"
    )
    parser.add_argument(
        "--server-tree",
        type=Path,
        default=None,
        help="serve the app from this source tree (a checkout of another commit), for old-vs-new runs",
    )
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of starting one")
    parser.add_argument("--log-level", default="INFO", help="the server's CITEBOT_LOG_LEVEL (default INFO)")
    args = parser.parse_args(list(argv))
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if not clients or any(c not in CLIENTS for c in clients):
        parser.error(f"--clients takes {', '.join(CLIENTS)}")

    namespace = f"bench-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="citebot-bench-") as tmp:
        redis_server = None if args.redis_url else RedisServer(Path(tmp) / "redis")
        redis_url = args.redis_url or redis_server.start()  # type: ignore[union-attr]
        port = free_port()
        env = {
            **os.environ,
            "CITEBOT_REDIS__URL": redis_url,
            "CITEBOT_REDIS__NAMESPACE": namespace,
            "CITEBOT_DISCOURSE__WEBHOOK_SECRET": SECRET,
            "CITEBOT_DISCOURSE__BOT_USERNAME": "citebot",
            "CITEBOT_LOG_LEVEL": args.log_level,
        }
        if args.server_tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(args.server_tree.resolve()), env.get("PYTHONPATH", "")])
        server = subprocess.Popen(
            [sys.executable, "-m", "worker.app.cli", "webhook", "serve", "--port", str(port)]
            + (["--workers", str(args.server_workers)] if args.server_workers > 1 else []),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        r = redis_lib.Redis.from_url(redis_url)
        try:
            _wait_ready(port, server)
            base = 10_000_000
            run_load(port, [delivery(base - i) for i in range(1, 501)], args.baseline_concurrency)  # warm-up
            pids = [server.pid] + ([redis_server.proc.pid] if redis_server and redis_server.proc else [])
            by_client: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
            for n, client in enumerate(clients):
                ref = run_load(port, [healthz()] * args.deliveries, args.baseline_concurrency, pids, client)
                offset = base + n * 4 * args.deliveries
                fresh = [delivery(offset + i) for i in range(args.deliveries)]
                by_client[client] = (run_load(port, fresh, args.baseline_concurrency, pids, client), ref)
                if n == 0:
                    requests = fresh
            measured, reference = by_client[clients[0]]
            replay = run_load(
                port, requests[:1000], args.baseline_concurrency
            )  # duplicates: acked, not enqueued
            burst = None
            if args.concurrency > args.baseline_concurrency:
                bursting = [delivery(base + 3 * args.deliveries + i) for i in range(args.deliveries)]
                burst = run_load(port, bursting, args.concurrency)
            hostile = asyncio.run(
                _hostile(
                    port, [hostile_delivery(base * 2 + i, raw) for i, raw in enumerate(REPRODUCERS.values())]
                )
            )
            queued = int(
                r.llen(f"{namespace}-tasks-tasks:questions") or r.llen(f"{namespace}-tasks:questions")
            )
        finally:
            server.terminate()
            server.wait(10)
            for key in r.scan_iter(match=f"{namespace}*", count=5000):
                r.delete(key)
            r.close()
            if redis_server is not None:
                redis_server.stop()

    # The warm-up deliveries and the two reproducers (they mention the bot after the backticks) count too.
    sent = [m for m, _ in by_client.values()] + ([burst] if burst else [])
    accepted = sum(int(m["ok"]) for m in sent) + 500 + int(hostile["ok"])
    lost = accepted - queued
    refused = sum(int(m["refused"]) for m in sent)
    print(
        f"webhook bench: {args.deliveries} signed deliveries, concurrency {args.baseline_concurrency}"
        + (f" then a burst at {args.concurrency}" if burst else "")
        + f", uvicorn ({_server_stack()}) on loopback, load average {os.getloadavg()[0]:.1f}"
    )
    route = "POST " + WEBHOOK_PATH
    phases: list[tuple[str, dict[str, float]]] = []
    for client, (new_run, ref_run) in by_client.items():
        phases += [(f"{route} (new, {client})", new_run), (f"GET /healthz (ref, {client})", ref_run)]
    phases.append((route + " (dup)", replay))
    if burst:
        phases.insert(1, (route + f" (burst x{args.concurrency})", burst))
    rows = [
        [
            name,
            m["requests"],
            m["rps"],
            m["p50_ms"],
            m["p99_ms"],
            m["max_ms"],
            m["cpu_us"] or "-",
            m["redis_cpu_us"] or "-",
            m["client_cpu_us"],
        ]
        for name, m in phases
    ]
    print_table(
        [
            "route",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "server+redis CPU µs",
            "of it redis µs",
            "client CPU µs",
        ],
        rows,
    )
    ratio = measured["rps"] / reference["rps"]
    print(
        f"deliveries/s vs /healthz: {ratio:.3f}; queued {queued} of {accepted} accepted (lost {lost}); "
        f"refused {refused}"
    )
    print(
        f"issue 13 reproducers (8k, 32k): slowest ack {hostile['ack_max_ms']:.1f} ms; slowest /healthz "
        f"meanwhile {hostile['healthz_max_ms']:.1f} ms over {hostile['healthz_polls']:.0f} polls"
    )
    passed = (
        measured["rps"] >= TARGET_RPS and measured["p99_ms"] < TARGET_P99_MS and lost == 0 and refused == 0
    )
    figures: dict[str, object] = {
        "concurrency": args.baseline_concurrency,
        "deliveries": args.deliveries,
        **_summary(measured, reference),
        "duplicate_per_s": round(replay["rps"], 1),
        "server_cpu_us_per_healthz": round(reference["cpu_us"], 1),
        "client": clients[0],
        "by_client": {client: _summary(new, ref) for client, (new, ref) in by_client.items()},
        "ratio_to_healthz": round(ratio, 3),
        "accepted": accepted,
        "queued": queued,
        "lost": lost,
        "refused": refused,
        "reproducer_ack_max_ms": round(hostile["ack_max_ms"], 2),
        "reproducer_healthz_max_ms": round(hostile["healthz_max_ms"], 2),
        "load_average": round(os.getloadavg()[0], 1),
        "server_log_level": args.log_level,
        "server_stack": _server_stack(),
        "server_tree": str(args.server_tree) if args.server_tree else None,
        "server_workers": args.server_workers,
        "target": {"deliveries_per_s": TARGET_RPS, "ack_p99_ms": TARGET_P99_MS},
        "passed": passed,
    }
    if burst:
        figures["burst"] = {
            "concurrency": args.concurrency,
            "deliveries_per_s": round(burst["rps"], 1),
            "ack_p50_ms": round(burst["p50_ms"], 2),
            "ack_p99_ms": round(burst["p99_ms"], 2),
            "ack_max_ms": round(burst["max_ms"], 2),
            "refused": int(burst["refused"]),
        }
    emit("webhook-burst" if burst else "webhook", figures)
    return 0 if lost == 0 and refused == 0 else 1
