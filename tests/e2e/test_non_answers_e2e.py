"""No question is dropped silently (issue 33, findings 1 and 3), end to end on the strict forum double:
a member's post → signed webhook → a real ``citebot worker run`` process.

Discourse behaviours these rest on, by source file:

- ``/admin/site_settings.json`` sits under ``AdminConstraint`` (config/routes.rb); with a wrong
  ``Api-Key`` Auth::DefaultCurrentUserProvider#current_user raises InvalidAccess, which the constraint
  rescues (lib/admin_constraint.rb): no route matches, 404 — a non-admin user gets the same;
- a PM to the bot notifies it (app/services/post_alerter.rb ``notify_pm_users``: notification type
  ``private_message``), while the post webhook carries only ``topic_archetype``
  (app/serializers/web_hook_post_serializer.rb), not who is in the PM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.stack import SESSION, Stack, open_stack, wait_for
from worker.summon import NOTICES

pytestmark = pytest.mark.integration

QUESTION = "@citebot how do I fix the shader precision compile error on Android?"


def _row(stack: Stack, post_id: int) -> dict[str, Any] | None:
    with psycopg.connect(stack.db_url) as conn:
        got = conn.execute(
            "SELECT state, reason, error, reply_post_id FROM answers WHERE post_id = %s", (post_id,)
        ).fetchone()
    return None if got is None else dict(zip(("state", "reason", "error", "reply_post_id"), got, strict=True))


def _settled(stack: Stack, post_id: int, timeout_s: float = 45.0) -> dict[str, Any]:
    """The row once it has left ``queued`` (any other state, ``held`` included)."""
    row: dict[str, Any] = wait_for(
        lambda: (r := _row(stack, post_id)) and r["state"] not in ("queued", "retrieved", "generated") and r,
        timeout_s,
        what=f"post {post_id} settled",
    )
    return row


def _citebot(stack: Stack, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.app.cli", *argv],
        env={**stack.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _replies_in(stack: Stack, topic_id: int) -> list[dict[str, Any]]:
    r = stack.http.get(
        f"{stack.forum_url}/t/{topic_id}.json", headers={"Api-Key": SESSION, "Api-Username": "system"}
    )
    r.raise_for_status()
    return [p for p in r.json()["post_stream"]["posts"] if p["username"] == "citebot"]


# -- finding 1 ----------------------------------------------------------------------------------------


def test_a_question_asked_while_the_settings_answer_500_is_held_then_answered_once(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        # A worker (re)started while the forum's database restarts: every settings read answers 500,
        # from its start on; members go on posting.
        stack.stop_worker()
        stack.forum.faults.update(
            {"errors_path": "/admin/site_settings.json", "errors_next": 100_000, "error_status": 500}
        )
        stack.start_worker()
        post_id = stack.ask("alice", 12, QUESTION)
        row = _settled(stack, post_id)
        assert (row["state"], row["reason"]) == ("held", "settings_unreadable"), row
        assert "500" in row["error"]
        time.sleep(3)  # retries back off (0.5-2 s here): still held, nothing posted
        assert _row(stack, post_id)["state"] == "held"  # type: ignore[index]
        assert stack.bot_replies(12) == []
        listed = _citebot(stack, "answers", "--unanswered")
        assert listed.returncode == 0, listed.stderr
        assert f"post {post_id}  topic 12  held settings_unreadable" in listed.stdout
        # The forum is back: the question is answered, once.
        stack.forum.faults.update({"errors_next": 0})
        wait_for(lambda: (r := _row(stack, post_id)) and r["state"] == "posted", 60, what="answered")
        assert len(stack.bot_replies(12)) == 1
        assert _row(stack, post_id)["reason"] is None  # type: ignore[index]


def test_a_worker_started_with_a_wrong_api_key_stops_with_one_line(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        done = _citebot(
            stack, "worker", "run", "--threads", "1", env={"CITEBOT_DISCOURSE__API_KEY": "not-the-key"}
        )
        assert done.returncode == 2, done.stderr
        cause = [line for line in done.stderr.splitlines() if line.startswith("citebot:")]
        assert len(cause) == 1, done.stderr
        assert "citebot site settings cannot be read" in cause[0]
        assert "HTTP 404" in cause[0]
        assert "CITEBOT_DISCOURSE__API_KEY" in cause[0]
        assert "not-the-key" not in done.stderr  # no secret in the message
        assert "worker started" not in done.stderr + done.stdout


# -- finding 3 ----------------------------------------------------------------------------------------


def test_policy_refusals_are_recorded_with_their_reason_and_the_chosen_notice(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = {"CITEBOT_LIMITS__PER_USER_PER_HOUR": "2"}
    with open_stack(db_url, redis_url, tmp_path, env=env) as stack:
        stack.stop_worker()
        stack.start_worker()  # with the limit of 2 a member per hour
        stack.admin().set_site_setting("citebot_refusal_notice", "short")
        time.sleep(3)  # the worker follows the settings within the stack's flag cache TTL (2 s)
        asked = [stack.ask("alice", 12, f"{QUESTION} ({n})") for n in range(4)]
        rows = [_settled(stack, post_id) for post_id in asked]
        # Two worker threads take the four questions in any order: two are answered, two are over the
        # limit, whichever they are.
        assert sorted(r["state"] for r in rows) == ["denied", "denied", "posted", "posted"]
        denied = [r for r in rows if r["state"] == "denied"]
        assert [r["reason"] for r in denied] == ["limit.per_user", "limit.per_user"]
        # One notice, with the first question over the limit; nothing for the next one.
        notice = NOTICES["limit"]["en"]
        notices = [p for p in _replies_in(stack, 12) if stack.raw(p["id"]) == notice]
        assert len(notices) == 1
        assert sorted((r["reply_post_id"] for r in denied), key=lambda v: v is not None) == [
            None,
            notices[0]["id"],
        ]

        # A PM to the bot while PMs are off: the webhook cannot tell the bot is in it; the poller reads
        # the bot's notification and the worker records the refusal and tells the member, once.
        for username in ("bob", "carol"):
            stack.http.post(
                f"{stack.forum_url}/__forum/users",
                headers={"Api-Key": SESSION, "Api-Username": "system"},
                json={"username": username},
            ).raise_for_status()
        r = stack.http.post(
            f"{stack.forum_url}/posts.json",
            headers={"Api-Key": SESSION, "Api-Username": "bob"},
            json={
                "title": "A private question about shaders",
                "raw": "How do I fix the shader precision compile error on Android?",
                "archetype": "private_message",
                "target_recipients": "citebot",
            },
        )
        r.raise_for_status()
        pm_post = int(r.json()["id"])
        polled = _citebot(stack, "poll", "--once")
        assert polled.returncode == 0, polled.stderr
        row = _settled(stack, pm_post)
        assert (row["state"], row["reason"]) == ("denied", "summon.pm_disabled")
        pm_topic = stack.topic_of(pm_post)
        assert [stack.raw(p["id"]) for p in _replies_in(stack, pm_topic)] == [NOTICES["pm"]["en"]]

        # The bot switched off: recorded, and told.
        stack.flags(enabled=False)
        time.sleep(3)
        off = stack.ask("carol", 11, QUESTION)
        row = _settled(stack, off)
        assert (row["state"], row["reason"]) == ("denied", "disabled")
        assert stack.raw(row["reply_post_id"]) == NOTICES["disabled"]["en"]

        # Every one of them is listed with its reason; the poller does not call them answered.
        listed = _citebot(stack, "answers", "--unanswered", "--json")
        assert listed.returncode == 0, listed.stderr
        reasons = sorted(json.loads(line)["reason"] for line in listed.stdout.splitlines())
        assert reasons == ["disabled", "limit.per_user", "limit.per_user", "summon.pm_disabled"]
        again = _citebot(stack, "poll", "--once")
        assert "answered 2, not answered 4, held 0" in again.stdout, again.stdout
