"""Who may summon the bot, and where (issue 32, findings 4, 7 and 8), end to end on the strict forum
double: a member's post → signed webhook → a real worker process → a posted reply, or a refusal
recorded on the ``answers`` row (state ``denied``, ``rule_id`` ``summon.<reason>``) and nothing posted.

Discourse behaviours these rest on, by source file:

- every PM post reaches post webhooks (app/models/web_hook.rb enqueues post events for all posts),
  while a mention inside a PM notifies its participants only (app/services/post_alerter.rb);
  an admin may read and post in every PM (lib/guardian/topic_guardian.rb ``can_see_topic?``,
  ``can_create_post_on_topic?``: ``return true if is_admin?``);
- an author may still edit a post of a closed topic (lib/guardian/post_guardian.rb ``can_edit_post?``
  refuses archived topics only), TL4 members and moderators may post in closed and archived topics,
  admins anywhere (topic_guardian.rb ``can_create_post_on_topic?``);
- a silenced member may still post in PMs it is part of (post_guardian.rb
  ``can_create_post_in_topic?``); staged accounts post by email;
- the account's trust level, groups, silenced/suspended/staged come from ``GET /admin/users/{id}.json``
  (app/serializers/admin_detailed_user_serializer.rb).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.stack import SESSION, Stack, open_stack, wait_for
from worker.summon import NOTICE

pytestmark = pytest.mark.integration

QUESTION = "how do I fix the shader precision compile error on Android? zanzibarquokka"
# A word in no export post: where it shows up, text of that question went there.
MARKER = "zanzibarquokka"


def _as(username: str) -> dict[str, str]:
    return {"Api-Key": SESSION, "Api-Username": username}


def _user(stack: Stack, username: str, **fields: Any) -> None:
    r = stack.http.post(
        f"{stack.forum_url}/__forum/users", headers=_as("system"), json={"username": username, **fields}
    )
    r.raise_for_status()


def _pm(stack: Stack, author: str, recipients: str, raw: str) -> int:
    """A new private message from ``author`` to ``recipients`` (comma-separated); its first post's id."""
    r = stack.http.post(
        f"{stack.forum_url}/posts.json",
        headers=_as(author),
        json={
            "title": "A private question about shaders",
            "raw": raw,
            "archetype": "private_message",
            "target_recipients": recipients,
        },
    )
    r.raise_for_status()
    return int(r.json()["id"])


def _status(stack: Stack, topic_id: int, status: str, enabled: bool = True) -> None:
    r = stack.http.put(
        f"{stack.forum_url}/t/{topic_id}/status.json",
        headers=_as("system"),
        json={"status": status, "enabled": "true" if enabled else "false"},
    )
    r.raise_for_status()


def _edit(stack: Stack, username: str, post_id: int, raw: str) -> None:
    r = stack.http.put(
        f"{stack.forum_url}/posts/{post_id}.json", headers=_as(username), json={"post": {"raw": raw}}
    )
    r.raise_for_status()


def _final(stack: Stack, post_id: int, timeout_s: float = 45.0) -> dict[str, Any]:
    done = {"posted", "denied", "refused", "abstained", "failed", "skipped", "held_for_review"}
    row: dict[str, Any] = wait_for(
        lambda: (r := stack.row(post_id)) and r["state"] in done and r,
        timeout_s,
        what=f"post {post_id} final",
    )
    return row


def _rule(stack: Stack, post_id: int) -> str | None:
    with psycopg.connect(stack.db_url) as conn:
        got = conn.execute("SELECT rule_id FROM answers WHERE post_id = %s", (post_id,)).fetchone()
    return None if got is None else got[0]


def _bot_posts_in(stack: Stack, topic_id: int) -> list[dict[str, Any]]:
    r = stack.http.get(f"{stack.forum_url}/t/{topic_id}.json", headers=_as("system"))
    r.raise_for_status()
    return [p for p in r.json()["post_stream"]["posts"] if p["username"] == "citebot"]


def _reached_a_model_or_search(stack: Stack) -> list[str]:
    """Where the marker went: the LLM, the embedder (TEI), Discourse's search."""
    seen = []
    if any(MARKER in str(body) for body in stack.models.bodies):
        seen.append("llm")
    if any(MARKER in text for call in stack.models.embedder.calls for text in call.texts):
        seen.append("embedder")
    if any(c.path == "/search.json" and MARKER in c.query for c in stack.forum.calls):
        seen.append("search")
    return seen


def _denied(stack: Stack, post_id: int, reason: str) -> None:
    row = _final(stack, post_id)
    assert row["state"] == "denied", row
    assert _rule(stack, post_id) == f"summon.{reason}"
    assert row["reply_post_id"] is None


# -- finding 4: private messages ----------------------------------------------------------------------


def test_with_pms_on_only_pms_the_bot_is_in_are_answered_and_no_pm_text_reaches_a_model(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path, discourse={"answer_pms": True}) as stack:
        _user(stack, "bob")
        between = _pm(stack, "alice", "bob", QUESTION)
        _denied(stack, between, "pm_not_participant")
        pm_topic = stack.topic_of(between)
        assert _bot_posts_in(stack, pm_topic) == []
        assert _reached_a_model_or_search(stack) == []
        assert not stack.is_indexed(between)  # a PM post is never evidence (backfill/evidence.py)

        to_bot = _pm(stack, "alice", "citebot", "How do I fix the shader precision compile error on Android?")
        assert _final(stack, to_bot)["state"] == "posted"
        assert len(_bot_posts_in(stack, stack.topic_of(to_bot))) == 1
        assert not stack.is_indexed(to_bot)


def test_with_pms_off_a_mention_inside_a_pm_reaches_no_model(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        _user(stack, "bob")
        mention = _pm(stack, "alice", "bob", f"@citebot {QUESTION}")
        _denied(stack, mention, "pm_disabled")
        assert _bot_posts_in(stack, stack.topic_of(mention)) == []
        assert _reached_a_model_or_search(stack) == []


# -- finding 7: who may summon the bot ----------------------------------------------------------------


def test_trust_level_0_staged_and_silenced_members_cannot_summon_the_bot(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path, discourse={"answer_pms": True}) as stack:
        _user(stack, "newbie", trust_level=0)
        _user(stack, "emailer", trust_level=1, staged=True)
        _user(stack, "mallory", trust_level=2, silenced=True)
        fresh = stack.ask("newbie", 12, f"@citebot {QUESTION}")
        staged = stack.ask("emailer", 12, f"@citebot {QUESTION} (by email)")
        # A silenced member may still write in a PM it is part of, and may message staff (the bot).
        silenced = _pm(stack, "mallory", "citebot", f"@citebot {QUESTION} (silenced)")
        _denied(stack, fresh, "trust_level")
        _denied(stack, staged, "staged")
        _denied(stack, silenced, "silenced")
        assert _bot_posts_in(stack, 12) == []
        assert _bot_posts_in(stack, stack.topic_of(silenced)) == []
        assert _reached_a_model_or_search(stack) == []
        # A member at the trust level is answered as before.
        member = stack.ask(
            "alice", 12, "@citebot how do I fix the shader precision compile error on Android?"
        )
        assert _final(stack, member)["state"] == "posted"


def test_allowed_groups_and_the_short_refusal_notice(db_url: str, redis_url: str, tmp_path: Path) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        stack.admin().set_site_setting("citebot_allowed_groups", "support")
        stack.admin().set_site_setting("citebot_refusal_notice", "short")
        _user(stack, "helper", trust_level=1, groups=["support"])
        time.sleep(3)  # the worker follows the settings within the stack's flag cache TTL (2 s)
        outsider = stack.ask("alice", 12, f"@citebot {QUESTION}")
        row = _final(stack, outsider)
        assert row["state"] == "denied"
        assert _rule(stack, outsider) == "summon.group"
        notices = _bot_posts_in(stack, 12)
        assert len(notices) == 1
        assert row["reply_post_id"] == notices[0]["id"]
        assert stack.raw(notices[0]["id"]) == NOTICE["en"]
        assert _reached_a_model_or_search(stack) == []
        insider = stack.ask(
            "helper", 12, "@citebot how do I fix the shader precision compile error on Android?"
        )
        assert _final(stack, insider)["state"] == "posted"


# -- finding 8: closed and archived topics -----------------------------------------------------------


def test_a_mention_edited_into_a_closed_topic_and_a_tl4_post_in_an_archived_one_get_no_answer(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        # Not a question yet: the live indexer may embed this text before the edit, so it carries no marker.
        post = stack.ask("alice", 12, "The shader precision compile error on Android again.")
        _status(stack, 12, "closed")
        _edit(stack, "alice", post, f"@citebot {QUESTION}")  # authors may edit in a closed topic
        _denied(stack, post, "topic_closed")
        assert _bot_posts_in(stack, 12) == []

        _user(stack, "veteran", trust_level=4)
        _status(stack, 11, "archived")
        archived = stack.ask("veteran", 11, f"@citebot {QUESTION} (archived)")  # TL4 may post there
        _denied(stack, archived, "topic_archived")
        assert _bot_posts_in(stack, 11) == []
        assert _reached_a_model_or_search(stack) == []
