"""One mapping of Discourse's post JSON to ``ForumPost``: the webhook payload and the REST answer agree."""

from __future__ import annotations

import ast
from pathlib import Path

from worker import webhook_events
from worker.app import webhook
from worker.domain import ForumPost
from worker.webhook_events import WebhookPost

POST = {
    "id": 41,
    "topic_id": 7,
    "post_number": 3,
    "raw": "@citebot how do I add a collision shape?",
    "cooked": "<p>how do I add a collision shape?</p>",
    "username": "alice",
    "user_id": 12,
    "post_type": 1,
    "reply_to_post_number": 2,
    "reply_to_user": {"username": "citebot", "name": "", "avatar_template": ""},
    "topic_archetype": "regular",
    "hidden": False,
    "deleted_at": None,
    "user_deleted": False,
    "version": 2,
}


def test_webhook_payload_and_rest_json_give_the_same_post() -> None:
    from_webhook = WebhookPost.model_validate(POST).to_domain()
    assert from_webhook == ForumPost.from_json(POST)
    assert (from_webhook.reply_to_username, from_webhook.version, from_webhook.deleted) == (
        "citebot",
        2,
        False,
    )


def test_a_deleted_post_is_deleted_either_way() -> None:
    gone = {**POST, "user_deleted": True}
    assert WebhookPost.model_validate(gone).to_domain().deleted
    assert ForumPost.from_json(gone).deleted


def test_the_webhook_reads_a_payload_without_the_rest_client() -> None:
    """The one parser belongs to the type it builds: neither the webhook app nor the payload models it
    reads import the Discourse client."""
    for module in (webhook, webhook_events):
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "worker.clients.discourse" not in imported, module.__name__
