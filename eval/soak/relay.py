"""The webhook storm: a relay between the forum and the webhook app.

The forum's webhook URL points here. Every delivery is recorded and forwarded to the webhook app; in
storm mode each one is sent 1–3 times, in random order within a short batch, and now and then a copy
with a forged signature is sent first (it must get 401 and enqueue nothing). Deliveries the forum drops
(its ``drop_webhooks_next`` knob) never reach the relay: the catch-up poller must find those.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger(__name__)

BATCH_S = 0.25
FORWARD_HEADERS = (
    "content-type",
    "x-discourse-instance",
    "x-discourse-event-id",
    "x-discourse-event-type",
    "x-discourse-event",
    "x-discourse-event-signature",
)


@dataclass
class RelayStats:
    received: int = 0
    sent: int = 0
    copies_extra: int = 0
    forged: int = 0
    forged_rejected: int = 0
    forged_accepted: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    by_post: dict[int, list[str]] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


@dataclass(frozen=True, slots=True)
class _Copy:
    body: bytes
    headers: dict[str, str]
    forged: bool


class StormRelay:
    """Receives the forum's deliveries and forwards them to ``target`` (a storm when ``storm`` is set)."""

    def __init__(self, target: str, *, seed: int, forged_share: float = 0.1) -> None:
        self.target = target
        self.storm = False
        self.forged_share = forged_share
        self.stats = RelayStats()
        self._rng = random.Random(seed)
        self._queue: queue.Queue[tuple[bytes, dict[str, str]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=10.0)
        self._thread = threading.Thread(target=self._forward_loop, name="soak-relay", daemon=True)
        self.app = Starlette(routes=[Route("/hook", self._receive, methods=["POST"])])
        self._thread.start()

    async def _receive(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARD_HEADERS}
        with self._lock:
            self.stats.received += 1
        self._queue.put((body, headers))
        return JSONResponse({"status": "relayed"})

    def idle(self) -> bool:
        return self._queue.empty()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(15)
        self._http.close()

    def _forward_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + (BATCH_S if self.storm else 0.0)
            stop = False
            while True:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            for copy in self._copies(batch):
                self._send(copy)
            if stop:
                return

    def _copies(self, batch: list[tuple[bytes, dict[str, str]]]) -> list[_Copy]:
        if not self.storm:
            return [_Copy(body, headers, False) for body, headers in batch]
        out: list[_Copy] = []
        for body, headers in batch:
            n = self._rng.randint(1, 3)
            self.stats.copies_extra += n - 1
            out.extend(_Copy(body, headers, False) for _ in range(n))
            if self._rng.random() < self.forged_share:
                forged = dict(headers)
                forged["x-discourse-event-signature"] = f"sha256={self._rng.getrandbits(256):064x}"
                out.append(_Copy(body, forged, True))
        self._rng.shuffle(out)
        return out

    def _send(self, copy: _Copy) -> None:
        try:
            response = self._http.post(self.target, content=copy.body, headers=copy.headers)
            status = response.status_code
            outcome = str(response.json().get("outcome", status)) if status < 500 else str(status)
        except (httpx.HTTPError, ValueError) as exc:
            status, outcome = 0, type(exc).__name__
        with self._lock:
            self.stats.sent += 1
            if copy.forged:
                self.stats.forged += 1
                if status == 401:
                    self.stats.forged_rejected += 1
                else:
                    self.stats.forged_accepted += 1
            else:
                self.stats.count(outcome)
            post_id = _post_id(copy.body)
            if post_id is not None:
                self.stats.by_post.setdefault(post_id, []).append(
                    ("forged:" if copy.forged else "") + outcome
                )


def _post_id(body: bytes) -> int | None:
    try:
        post = json.loads(body).get("post") or {}
        return int(post["id"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
