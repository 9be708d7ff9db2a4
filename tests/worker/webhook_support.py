"""Shared helpers of the webhook tests: a recording ``Intake`` and signed Discourse deliveries."""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass, field

from worker.redis_batch import RedisCommand
from worker.webhook_events import sign

SECRET = "a-long-webhook-secret"
_ids = itertools.count(1)


@dataclass
class FakeIntake:
    """Records what the webhook app accepted, instead of enqueueing it."""

    questions: list[tuple[int, int, int]] = field(default_factory=list)
    to_confirm: list[tuple[int, int]] = field(default_factory=list)  # (post id, reply_to_post_number)
    posts: list[tuple[int, str]] = field(default_factory=list)
    topics: list[tuple[int, str]] = field(default_factory=list)
    categories: list[tuple[int, str]] = field(default_factory=list)
    delayed: list[tuple[int, str, float]] = field(default_factory=list)  # (post id, event, delay s)
    fail_with: Exception | None = None

    def question(self, post_id: int, topic_id: int, version: int, reply_to: int | None = None) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.questions.append((post_id, topic_id, version))
        if reply_to is not None:
            self.to_confirm.append((post_id, reply_to))

    def refresh_post(self, post_id: int, event: str, delay_s: float = 0.0) -> None:
        if delay_s:
            self.delayed.append((post_id, event, delay_s))
        else:
            self.posts.append((post_id, event))

    def refresh_topic(self, topic_id: int, event: str) -> None:
        self.topics.append((topic_id, event))

    def refresh_category(self, category_id: int, event: str) -> None:
        self.categories.append((category_id, event))

    def outbox(self) -> contextlib.AbstractContextManager[list[RedisCommand]]:
        return contextlib.nullcontext([])


def post_payload(**fields: object) -> dict[str, object]:
    """A WebHookPostSerializer-shaped payload for a member's post."""
    post: dict[str, object] = {
        "id": next(_ids) + 1_000_000,
        "name": "Alice",
        "username": "alice",
        "avatar_template": "/letter_avatar_proxy/v4/letter/a/{size}.png",
        "created_at": "2024-05-01T10:00:00.000Z",
        "cooked": '<p><a class="mention" href="/u/citebot">@citebot</a> how do I build on Windows?</p>',
        "post_number": 2,
        "post_type": 1,
        "updated_at": "2024-05-01T10:00:00.000Z",
        "reply_count": 0,
        "reply_to_post_number": None,
        "quote_count": 0,
        "topic_id": 77,
        "topic_slug": "a-topic",
        "topic_title": "A topic",
        "category_id": 10,
        "category_slug": "help",
        "topic_archetype": "regular",
        "topic_posts_count": 2,
        "user_id": 42,
        "hidden": False,
        "deleted_at": None,
        "user_deleted": False,
        "version": 1,
        "raw": "@citebot how do I build on Windows?",
        "reply_to_user": None,
    }
    if "raw" in fields and "cooked" not in fields:
        del post["cooked"]  # a test that writes its own raw: the receiver falls back to parsing it
    post.update(fields)
    return {"post": post}


def headers(
    body: bytes, event: str = "post_created", secret: str = SECRET, event_type: str = "post"
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-Discourse-Instance": "http://forum.test",
        "X-Discourse-Event-Id": str(next(_ids)),
        "X-Discourse-Event-Type": event_type,
        "X-Discourse-Event": event,
        "X-Discourse-Event-Signature": sign(secret.encode(), body),
    }


def encode(payload: object) -> bytes:
    return json.dumps(payload).encode()
