"""Signed webhook deliveries like Discourse's: a background sender, the real headers, a delivery log.

Each event gets a new id; a manual redelivery (``redeliver``) keeps the id and the body, as Discourse's
"Redeliver" button does. ``Faults.drop_webhooks_next`` / ``drop_webhooks`` lose deliveries on purpose.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

log = logging.getLogger(__name__)

# X-Discourse-Event-Type: the payload type WebHook.enqueue_*_hooks name (config/initializers/
# 012-web_hook_events.rb); the body is {type: payload} (Jobs::EmitWebHookEvent#build_webhook_body).
EVENT_TYPES = {
    "post_created": "post",
    "post_edited": "post",
    "post_destroyed": "post",
    "post_recovered": "post",
    "topic_created": "topic",
    "topic_edited": "topic",
    "topic_destroyed": "topic",
    "topic_recovered": "topic",
    "topic_closed_status_updated": "topic",
    "topic_archived_status_updated": "topic",
    "topic_visible_status_updated": "topic",
    "category_created": "category",
    "category_updated": "category",
    "reviewable_created": "reviewable",
    "reviewable_score_updated": "reviewable",
    "reviewable_transitioned_to": "reviewable",
}


@dataclass
class Delivery:
    event_id: int
    event: str
    body: bytes
    status: int | str = "pending"
    attempts: int = 0


@dataclass
class Faults:
    """Knobs for tests: API latency, the next N API calls (or those to one path) answering 429 or 5xx,
    lost webhooks, and a review queue (``hold_for_review``: comma-separated usernames whose posts wait
    for a moderator, as Discourse does for a new account under ``approve_post_count``; staff are
    exempt)."""

    latency_s: float = 0.0
    rate_limit_next: int = 0
    retry_after_s: int = 3
    errors_next: int = 0
    error_status: int = 502
    # Only requests to this path count against errors_next ('' : every API request): a site-settings
    # outage (``/admin/site_settings.json``) while members go on posting.
    errors_path: str = ""
    drop_webhooks_next: int = 0
    drop_webhooks: bool = False
    hold_for_review: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, name: str) -> bool:
        """Consume one unit of the counter ``name``; True if there was one."""
        with self.lock:
            left = getattr(self, name)
            if left > 0:
                setattr(self, name, left - 1)
                return True
            return False

    def take_error(self, path: str) -> bool:
        """Consume one of ``errors_next`` for a request to ``path`` (see ``errors_path``)."""
        if self.errors_path and path != self.errors_path:
            return False
        return self.take("errors_next")

    def update(self, values: dict[str, Any]) -> None:
        with self.lock:
            for key, value in values.items():
                if key == "lock" or not hasattr(self, key):
                    raise ValueError(f"unknown fault {key!r}")
                setattr(self, key, type(getattr(self, key))(value))

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if k != "lock"}


class WebhookSender:
    """Delivers events to ``url`` from a background thread, signed with ``secret`` when one is set."""

    def __init__(
        self, url: str | None, secret: str, instance: str, faults: Faults, *, timeout_s: float = 20.0
    ) -> None:
        self.url = url
        self.secret = secret
        self.instance = instance
        self.faults = faults
        self.deliveries: list[Delivery] = []
        self._ids = itertools.count(1)
        self._queue: queue.Queue[Delivery | threading.Event] = queue.Queue()
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout_s)
        self._thread = threading.Thread(target=self._run, name="forum-webhooks", daemon=True)
        self._thread.start()

    def emit(self, event: str, payload: dict[str, Any]) -> Delivery | None:
        """Queue a new event (a new id); None when no URL is configured."""
        if not self.url:
            return None
        delivery = Delivery(next(self._ids), event, json.dumps(payload).encode("utf-8"))
        with self._lock:
            self.deliveries.append(delivery)
        self._queue.put(delivery)
        return delivery

    def redeliver(self, event_id: int) -> Delivery | None:
        """Send an event again with the same id and body (Discourse's manual redelivery)."""
        with self._lock:
            found = next((d for d in self.deliveries if d.event_id == event_id), None)
        if found is not None:
            self._queue.put(found)
        return found

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued delivery was attempted."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout_s)

    def close(self) -> None:
        self.flush(2.0)
        self._http.close()

    def headers(self, delivery: Delivery) -> dict[str, str]:
        headers = {
            "Accept": "*/*",
            "Content-Type": "application/json",
            "User-Agent": "Discourse/3.2.0 (local forum server)",
            "Host": httpx.URL(self.url or "http://x/").host,
            "X-Discourse-Instance": self.instance,
            "X-Discourse-Event-Id": str(delivery.event_id),
            "X-Discourse-Event-Type": EVENT_TYPES.get(delivery.event, delivery.event.split("_")[0]),
            "X-Discourse-Event": delivery.event,
        }
        if len(self.secret) >= 12:  # Discourse signs only with a secret of at least 12 characters
            digest = hmac.new(self.secret.encode("utf-8"), delivery.body, hashlib.sha256).hexdigest()
            headers["X-Discourse-Event-Signature"] = f"sha256={digest}"
        return headers

    def _run(self) -> None:
        while True:
            delivery = self._queue.get()
            if isinstance(delivery, threading.Event):
                delivery.set()
                continue
            delivery.attempts += 1
            if self.faults.drop_webhooks or self.faults.take("drop_webhooks_next"):
                delivery.status = "dropped"
                continue
            try:
                response = self._http.post(
                    self.url or "", content=delivery.body, headers=self.headers(delivery)
                )
                delivery.status = response.status_code
            except httpx.HTTPError as exc:
                delivery.status = type(exc).__name__
                log.debug("webhook %d failed: %s", delivery.event_id, delivery.status)
