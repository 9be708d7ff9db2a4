"""The six places where Discourse is stricter than the forum double used to be (issue 15), end to end:
the double now behaves as Discourse's source says, and citebot behaves right against it.

1. one admin-API bucket for the whole site (``default_current_user_provider.rb``);
2. ``reply_to_user`` left out of a reply that quotes its parent (``suppress_reply_when_quoting``);
3. deleting a topic sends ``post_destroyed`` for its first post only, plus ``topic_destroyed``;
4. ``/admin/site_settings.json`` filters by ``plugin`` / ``categories`` only;
5. a reply held for review answers 200 ``{"action": "enqueued", "pending_post": …}``, no post id;
6. OpenAI's reasoning models refuse ``max_tokens`` (``max_completion_tokens``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs

import psycopg
import pytest

from tests.e2e.stack import SESSION, Stack, open_stack, wait_for
from tests.eval.forum.export import TOPICS

pytestmark = pytest.mark.integration

QUESTION = "@citebot how do I fix the shader precision compile error on Android?"


def _posted(stack: Stack, post_id: int, timeout_s: float = 45.0) -> dict[str, object]:
    row: dict[str, object] = wait_for(
        lambda: (r := stack.row(post_id)) and r["state"] == "posted" and r, timeout_s, what="posted"
    )
    return row


def test_flags_are_read_with_the_plugin_filter_not_the_whole_settings_list(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        _posted(stack, stack.ask("alice", 12, QUESTION))
        reads = [c for c in stack.forum.calls if c.path == "/admin/site_settings.json"]
        assert reads
        for call in reads:
            assert parse_qs(call.query) == {"plugin": ["citebot"]}, call.query
        # What an unfiltered read (or one with the ignored `filter=`) would have downloaded:
        everything = stack.http.get(
            f"{stack.forum_url}/admin/site_settings.json",
            params={"filter": "citebot"},
            headers={"Api-Key": SESSION, "Api-Username": "system"},
        ).json()["site_settings"]
        assert len(everything) >= 400


def test_reasoning_model_refusing_max_tokens_gets_max_completion_tokens(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = {"CITEBOT_LLM__TOKEN_LIMIT_PARAM": "max_completion_tokens"}
    with open_stack(db_url, redis_url, tmp_path, env=env) as stack:
        stack.models.reasoning_model = True
        _posted(stack, stack.ask("alice", 12, QUESTION))
        body = stack.models.bodies[-1]
        assert "max_tokens" not in body
        assert body["max_completion_tokens"] > 0


def test_reply_held_for_review_is_final_and_never_posted_twice(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    # A bot account that is not staff, in a forum that sends its posts to the review queue; the flags
    # come from the environment since a non-admin cannot read site settings, and the asker from the
    # public profile since a non-admin cannot read /admin/users (worker/members.py).
    env = {f"CITEBOT_FLAGS__OVERRIDE_{name}": "true" for name in ("ENABLED", "POSTS_PIPELINE", "RERANK")}
    env["CITEBOT_SUMMON__PUBLIC_PROFILE_FALLBACK"] = "true"
    with open_stack(
        db_url, redis_url, tmp_path, env=env, forum={"bot_admin": False, "admins": ("system",)}
    ) as stack:
        stack.forum.faults.update({"hold_for_review": "citebot"})
        post_id = stack.ask("alice", 12, QUESTION)
        row = wait_for(
            lambda: (r := stack.row(post_id)) and r["state"] == "held_for_review" and r, what="held"
        )
        time.sleep(4)  # several retry back-offs (0.5-2 s here): nothing more may be queued
        assert stack.row(post_id)["state"] == "held_for_review"  # type: ignore[index]
        assert len(stack.forum.pending_posts) == 1
        assert stack.bot_replies(12) == []
        assert row["reply_post_id"] is None
        status = subprocess.run(
            [sys.executable, "-m", "worker.app.cli", "answers", "--state", "held_for_review"],
            env=stack.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        assert str(post_id) in status.stdout


def test_deleting_a_topic_removes_all_its_posts_from_the_index_and_recovering_restores_them(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        before = stack.indexed(11)
        assert len(before) == 3
        admin = {"Api-Key": SESSION, "Api-Username": "system"}
        stack.http.delete(f"{stack.forum_url}/t/11.json", headers=admin).raise_for_status()
        assert stack.forum.webhooks.flush()
        events = [d.event for d in stack.forum.webhooks.deliveries]
        assert events[-2:] == ["post_destroyed", "topic_destroyed"]
        wait_for(lambda: stack.indexed(11) == [], what="topic 11 out of the index")
        stack.http.put(f"{stack.forum_url}/t/11/recover.json", headers=admin).raise_for_status()
        wait_for(lambda: stack.indexed(11) == before, what="topic 11 back in the index")


def test_quoting_the_bot_in_a_reply_is_a_question_to_the_bot(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        first = _posted(stack, stack.ask("alice", 12, QUESTION))
        reply = stack.http.get(
            f"{stack.forum_url}/posts/{first['reply_post_id']}.json",
            headers={"Api-Key": SESSION, "Api-Username": "system"},
        ).json()
        number = int(reply["post_number"])
        follow_up = stack.ask(
            "bob",
            12,
            f'[quote="citebot, post:{number}, topic:12"]\nAdd a precision qualifier\n[/quote]\n\n'
            "Does the precision qualifier also fix the error on iOS devices?",
            reply_to_post_number=number,
        )
        seen = stack.http.get(
            f"{stack.forum_url}/posts/{follow_up}.json",
            headers={"Api-Key": SESSION, "Api-Username": "system"},
        ).json()
        assert "reply_to_user" not in seen  # Discourse's suppress_reply_when_quoting
        assert seen["reply_to_post_number"] == number
        _posted(stack, follow_up)
        # An ordinary quote-reply to someone else's post is still not a question to the bot.
        other = stack.ask(
            "carol",
            12,
            '[quote="dave, post:1, topic:12"]\nRigid bodies jitter\n[/quote]\n\nSame here with many bodies.',
            reply_to_post_number=1,
        )
        time.sleep(3)
        assert stack.row(other) is None


def test_backfill_beside_answers_stays_under_the_site_api_limit(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    # Discourse's 60 requests a minute, on a 10 s window (10 per 10 s) so the test runs in seconds.
    # citebot's share: 40 a minute with a burst of 3, so at most 3 + 6.7 requests in any 10 s.
    forum = {"admin_api_reqs_per_minute": 10, "admin_api_window_s": 10.0}
    env = {
        "CITEBOT_DISCOURSE__API_REQUESTS_PER_MINUTE": "40",
        "CITEBOT_DISCOURSE__API_BURST": "3",
        "CITEBOT_DISCOURSE__API_RESERVE": "1",
    }
    # A forum of 15 topics: the API backfill reads each topic once, about 20 requests.
    topics = TOPICS + [
        {
            "id": 20 + i,
            "title": f"Scene node question number {i}",
            "category_id": 7,
            # Answered: a topic's first post nobody answered is not evidence (backfill/evidence.py).
            "posts": [
                ("carol", f"How do I attach component number {i} to a scene node at runtime?"),
                ("dave", f"Call CreateComponent on the node for component number {i}."),
            ],
        }
        for i in range(12)
    ]
    with open_stack(db_url, redis_url, tmp_path, env=env, forum=forum, topics=topics) as stack:
        backfill = subprocess.Popen(
            [sys.executable, "-m", "worker.app.cli", "backfill", "--source", "api", "--progress", "log"],
            env={**stack.env, **os.environ, **env, **_backfill_env(stack)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(2)  # the backfill has taken the bucket's burst
            post_id = stack.ask("alice", 12, QUESTION)
            _posted(stack, post_id, timeout_s=60)
            answered_while_backfilling = backfill.poll() is None
            _, err = backfill.communicate(timeout=180)
        finally:
            if backfill.poll() is None:
                backfill.kill()
        assert backfill.returncode == 0, err.decode()[-2000:]
        assert answered_while_backfilling
        assert stack.forum.api_limiter.refused == 0, "Discourse answered 429"
        with psycopg.connect(stack.db_url) as conn:
            row = conn.execute("SELECT count(*) FROM post_index").fetchone()
        assert row is not None
        assert row[0] >= 5 + 2 * 12  # the export's posts but topic 12's open question, and the new topics


def _backfill_env(stack: Stack) -> dict[str, str]:
    return {k: v for k, v in stack.env.items() if k.startswith("CITEBOT_")}
