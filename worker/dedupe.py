"""Short-lived Redis keys that stop a repeated webhook delivery (or a poll) from queueing work twice.

Only a delivery's body is signed, so every key comes from the body, never from a header:

- a question is keyed on (post id, version): the webhook (``post_created`` or ``post_edited``, whichever
  comes) and the poller share it, so one version of a post is asked at most once, and an edit event for
  an unchanged version does nothing. Discourse's automatic retries get a new event id and manual
  redeliveries keep it, so the event id is no key either;
- an index refresh is keyed on the digest of the signed body: a replayed body, whatever event header
  it carries, queues nothing; any change of the post gives a new body (``updated_at``, ``version``).

The database's unique ``answers.post_id`` is the second, durable line of defence against answering twice.
"""

from __future__ import annotations

import hashlib

import redis as redis_lib


def question_key(namespace: str, post_id: int, version: int) -> str:
    """The key of one version of one post asked as a question."""
    return f"{namespace}:question-seen:{int(post_id)}:{int(version)}"


def delivery_key(namespace: str, body: bytes) -> str:
    """The key of one signed delivery body."""
    return f"{namespace}:delivery-seen:{hashlib.sha256(body).hexdigest()}"


def first_sighting(client: redis_lib.Redis, key: str, ttl_s: int) -> bool:
    """Atomically mark ``key`` seen (SET NX EX); True only for the first caller within ``ttl_s``."""
    return bool(client.set(key, b"1", nx=True, ex=int(ttl_s)))


def forget(client: redis_lib.Redis, key: str) -> None:
    """Undo ``first_sighting`` when the enqueue behind it failed, so a redelivery can succeed."""
    client.delete(key)
