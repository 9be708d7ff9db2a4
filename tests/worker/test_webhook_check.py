"""The worker's start-up check of the forum's webhooks (worker/webhook_check.py), on bodies shaped as
Admin::WebHooksController#index and AdminWebHookSerializer return them."""

from __future__ import annotations

from typing import Any

import pytest

from worker.errors import AuthError, ServiceUnavailableError
from worker.webhook_check import NO_WEBHOOK, check_webhook_events, subscription_problems
from worker.webhook_events import REQUIRED_EVENT_TYPES


def hook(names: tuple[str, ...] = (), **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": 1,
        "payload_url": "https://citebot.example/webhooks/discourse",
        "content_type": 1,
        "last_delivery_status": 3,
        "secret": "",
        "wildcard_web_hook": False,
        "verify_certificate": True,
        "active": True,
        "web_hook_event_types": [{"id": i, "name": n, "group": n.split("_")[0]} for i, n in enumerate(names)],
        "category_ids": [],
        "group_ids": [],
        "tag_names": [],
    }
    body.update(fields)
    return body


def test_every_needed_event_or_everything_passes() -> None:
    assert subscription_problems([hook(REQUIRED_EVENT_TYPES)]) == []
    assert subscription_problems([hook(wildcard_web_hook=True)]) == []


def test_the_default_post_events_only_miss_the_permission_events() -> None:
    # WebHook.default_event_types: the four post events.
    problems = subscription_problems(
        [hook(("post_created", "post_edited", "post_destroyed", "post_recovered"))]
    )
    assert len(problems) == 1
    for name in ("topic_edited", "category_updated", "reviewable_created", "reviewable_updated"):
        assert name in problems[0]


def test_filters_inactive_hooks_and_no_hook_at_all() -> None:
    filtered = hook(REQUIRED_EVENT_TYPES, category_ids=[4])
    assert "filtered by category_ids" in subscription_problems([filtered])[0]
    assert subscription_problems([hook(REQUIRED_EVENT_TYPES, active=False)]) == [NO_WEBHOOK]
    assert subscription_problems([]) == [NO_WEBHOOK]
    # Behind a proxy that rewrites the path, every active hook is judged.
    assert subscription_problems([hook(wildcard_web_hook=True, payload_url="https://x.example/in")]) == []


def test_when_the_api_cannot_tell_the_check_passes(caplog: pytest.LogCaptureFixture) -> None:
    def refused() -> list[dict[str, Any]]:
        raise AuthError("403", service="discourse", status=403)

    def down() -> list[dict[str, Any]]:
        raise ServiceUnavailableError("502", service="discourse")

    assert check_webhook_events(refused) == []
    assert check_webhook_events(down) == []
    assert check_webhook_events(lambda: [hook(("post_created",))])  # the gap is logged and returned
