"""The worker's start-up check of the forum's webhooks: is every event citebot needs subscribed?

``GET /admin/api/web_hooks.json`` (Admin::WebHooksController#index, admin only) lists each webhook as
AdminWebHookSerializer shows it: ``payload_url``, ``active``, ``wildcard_web_hook`` (every event),
``web_hook_event_types`` (``[{id, name, group}]``) and its ``category_ids`` / ``group_ids`` /
``tag_names`` filters. A delivery filtered by category never reaches a webhook that lists categories
for an event without one (a category or reviewable event: ``category_webhook_invalid?``,
app/jobs/regular/emit_web_hook_event.rb), so a filtered webhook is reported too.

Where the API cannot tell (the key is not an admin's, an old Discourse), the check says so and passes:
it warns, it never stops the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from worker.errors import CitebotError, PermanentError
from worker.webhook_events import REQUIRED_EVENT_TYPES, WEBHOOK_PATH

log = logging.getLogger(__name__)

NO_WEBHOOK = (
    "the forum has no active webhook: citebot learns of new posts only from its poller, and the index "
    "follows no edit, permission or visibility change (docs/intake.md)"
)


def subscription_problems(hooks: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the forum's webhooks for citebot, one line each (empty: nothing)."""
    active = [h for h in hooks if h.get("active")]
    ours = [h for h in active if str(h.get("payload_url") or "").rstrip("/").endswith(WEBHOOK_PATH)]
    if not ours:
        if not active:
            return [NO_WEBHOOK]
        ours = active  # a proxy in front of the receiver may rewrite the path: judge every active hook
    subscribed: set[str] = set()
    problems = []
    for hook in ours:
        if hook.get("wildcard_web_hook"):
            subscribed.update(REQUIRED_EVENT_TYPES)
        else:
            types = hook.get("web_hook_event_types") or []
            subscribed.update(str(t.get("name")) for t in types if isinstance(t, Mapping))
        filters = [k for k in ("category_ids", "group_ids", "tag_names") if hook.get(k)]
        if filters:
            problems.append(
                f"webhook {hook.get('id')} is filtered by {', '.join(filters)}: category and reviewable "
                "events never reach it, and events outside the filter neither; clear the filters"
            )
    missing = [name for name in REQUIRED_EVENT_TYPES if name not in subscribed]
    if missing:
        problems.append(
            "the forum's webhook does not send "
            + ", ".join(missing)
            + ": tick them (or 'Send me everything'), see deploy/discourse-plugin/README.md"
        )
    return problems


def check_webhook_events(list_hooks: Callable[[], list[dict[str, Any]]]) -> list[str]:
    """Read the forum's webhooks with ``list_hooks`` and log what is missing; returns the lines."""
    try:
        hooks = list_hooks()
    except PermanentError as exc:  # 403 (not an admin's key), 404 (an older Discourse)
        log.info("cannot check the forum's webhook events (%s): an admin API key can", exc)
        return []
    except CitebotError as exc:
        log.warning("cannot check the forum's webhook events now: %s", exc)
        return []
    problems = subscription_problems(hooks)
    for line in problems:
        log.warning("%s", line)
    return problems
