"""Short-lived Redis keys that stop a repeated webhook delivery (or a poll) from enqueueing twice.

Discourse's automatic retries get a new event id and manual redeliveries keep it, so the key is the
(event, post id, version) triple, not the event id. The database's unique ``answers.post_id`` is the
second, durable line of defence.
"""

from __future__ import annotations

import redis as redis_lib


def dedupe_key(namespace: str, event: str, post_id: int, version: int) -> str:
    return f"{namespace}:webhook-seen:{event}:{int(post_id)}:{int(version)}"


def first_sighting(client: redis_lib.Redis, key: str, ttl_s: int) -> bool:
    """Atomically mark ``key`` seen (SET NX EX); True only for the first caller within ``ttl_s``."""
    return bool(client.set(key, b"1", nx=True, ex=int(ttl_s)))


def forget(client: redis_lib.Redis, key: str) -> None:
    """Undo ``first_sighting`` when the enqueue behind it failed, so a redelivery can succeed."""
    client.delete(key)
