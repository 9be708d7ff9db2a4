"""No question is dropped silently (issue 33, findings 1 and 3), over real PostgreSQL and Redis with the
in-memory forum: flags that were never read hold the question (state ``held``) until they can be, and
every policy "no" (``citebot_enabled`` off, the hourly limits, a PM while PMs are off) ends ``denied``
with its reason, the short notice posted when the admin chose it, once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import psycopg
import pytest
from prometheus_client import REGISTRY

from tests.conftest import REDIS_NAMESPACE, RedisClients
from tests.worker.test_pipeline import World, build_world
from worker import answers
from worker.errors import (
    AuthError,
    ConfigError,
    NotFoundError,
    ServiceUnavailableError,
    TransientError,
)
from worker.flags import FlagReader, check_access
from worker.limits import RateLimiter
from worker.settings import FlagsSettings
from worker.testing.chat import FakeChatModel

pytestmark = pytest.mark.integration

QUESTION = "@citebot how do I stop shadow flicker?"
LIMIT_NOTICE = "Sorry, you have asked me many questions in the last hour. Please try again later."
PM_NOTICE = "Sorry, I do not answer private messages. Please ask in a topic of the forum."
OFF_NOTICE = "Sorry, I am not answering questions at the moment."


@pytest.fixture
def world(db_url: str, redis_url: str) -> Iterator[World]:
    yield from build_world(db_url, redis_url, FakeChatModel(default="Raise the shadow bias [[1]]."))


def _clocked(world: World) -> list[float]:
    """Give the pipeline a flag reader on a clock the test moves (``t[0] += 60``: the cache expired)."""
    t = [0.0]
    world.pipeline.flags = FlagReader(world.forum.get_site_settings, world.settings.flags, clock=lambda: t[0])
    return t


def _unanswered(state: str, reason: str) -> float:
    value = REGISTRY.get_sample_value("citebot_unanswered_total", {"state": state, "reason": reason})
    return value or 0.0


def _limited(world: World, redis_client: RedisClients, redis_url: str, per_user: int) -> None:
    limits = world.settings.limits.model_copy(update={"per_user_per_hour": per_user})
    world.pipeline.limiter = RateLimiter(redis_client(redis_url), limits, REDIS_NAMESPACE)


# -- finding 1: flags never read hold the question -----------------------------------------------------


def test_a_question_asked_before_the_flags_could_be_read_is_held_then_answered(world: World) -> None:
    t = _clocked(world)
    world.forum.fail_settings = ServiceUnavailableError("bad gateway", service="discourse", status=502)
    held_before = _unanswered("held", "settings_unreadable")
    world.ask(921, 1, QUESTION)
    # Not decided on the defaults (citebot_enabled off): held, and the queue retries it.
    with pytest.raises(TransientError):
        world.pipeline.run(921)
    row = world.row(921)
    assert (row.state, row.reason) == ("held", "settings_unreadable")
    assert "ServiceUnavailableError" in (row.error or "")
    # The last attempt the queue allows does not give up (no apology, no "failed"): the row stays held
    # for the poller, counted once.
    t[0] += 60
    assert world.pipeline.run(921, last_attempt=True).state == "held"
    assert world.row(921).state == "held"
    assert world.forum.created == []
    assert _unanswered("held", "settings_unreadable") == held_before + 1
    # The forum is back: the same question is answered, once.
    world.forum.fail_settings = None
    t[0] += 60
    assert world.pipeline.run(921).state == "posted"
    row = world.row(921)
    assert (row.state, row.reason, row.error) == ("posted", None, None)
    assert len(world.forum.created) == 1


def test_with_enabled_pinned_in_the_environment_unreadable_settings_hold_nothing(
    db_url: str, redis_url: str
) -> None:
    # A bot that is not an admin cannot read the settings at all; its operator pins the flags.
    chat = FakeChatModel(default="Raise the shadow bias [[1]].")
    for world in build_world(db_url, redis_url, chat, flags={"override_enabled": True}):
        world.forum.fail_settings = NotFoundError("not_found", service="discourse", status=404)
        world.ask(924, 1, QUESTION)
        assert world.pipeline.run(924).state == "posted"


def test_after_one_good_read_a_failing_read_keeps_the_last_known_flags(world: World) -> None:
    t = _clocked(world)
    world.ask(922, 1, QUESTION)
    assert world.pipeline.run(922).state == "posted"
    world.forum.fail_settings = AuthError("key revoked", service="discourse", status=403)
    t[0] += 60
    world.ask(923, 2, "@citebot how do I load a scene from XML?")
    assert world.pipeline.run(923).state == "posted"
    assert world.row(923).trace["info"]["flags"]["origin"] == "last_known"


def test_held_rows_are_sent_again_whatever_their_age_open_ones_within_the_look_back(
    db_url: str, world: World
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for post_id in (931, 932):
            answers.claim(conn, post_id, 1, 3, 1, 7, "member", "webhook")
        answers.transition(conn, 931, ["queued"], "held", reason="settings_unreadable")
        conn.execute(
            "UPDATE answers SET created_at = now() - interval '3 days',"
            " updated_at = now() - interval '1 hour' WHERE post_id IN (931, 932)"
        )
        assert answers.claim_stale(conn, older_than_s=600, newer_than_s=3600) == [(931, 1, 1)]
        assert answers.claim_stale(conn, older_than_s=600, newer_than_s=3600) == []  # touched: once a period


def test_a_refused_credential_at_start_up_is_a_configuration_error_an_outage_is_not() -> None:
    def failing(error: Exception) -> Callable[[object], dict[str, object]]:
        def read(_names: object) -> dict[str, object]:
            raise error

        return read

    flags = FlagsSettings()
    for refused in (
        AuthError("invalid_access", service="discourse", status=403),
        NotFoundError("not_found", service="discourse", status=404),  # a wrong key on /admin/ routes
    ):
        with pytest.raises(ConfigError, match="CITEBOT_DISCOURSE__API_KEY"):
            check_access(failing(refused), flags)
        # A bot that is not an admin, its flags pinned in the environment: the settings are not needed.
        check_access(failing(refused), FlagsSettings(override_enabled=True))
    check_access(failing(ServiceUnavailableError("bad gateway", service="discourse", status=502)), flags)
    check_access(lambda names: {}, flags)


# -- finding 3: policy "no"s are recorded, with the notice the admin chose ---------------------------


def test_over_the_hourly_limit_is_denied_with_its_reason_and_one_notice(
    world: World, redis_client: RedisClients, redis_url: str
) -> None:
    _limited(world, redis_client, redis_url, per_user=1)
    world.forum.settings["citebot_refusal_notice"] = "short"
    before = _unanswered("denied", "limit.per_user")
    world.ask(941, 1, QUESTION)
    world.ask(942, 1, "@citebot and how do I stop shadow acne?", post_number=4)
    world.ask(943, 1, "@citebot and peter panning?", post_number=5)
    assert world.pipeline.run(941).state == "posted"
    assert world.pipeline.run(942).state == "denied"
    assert world.pipeline.run(943).state == "denied"
    for post_id in (942, 943):
        row = world.row(post_id)
        assert (row.state, row.reason) == ("denied", "limit.per_user")
        assert "rate limit per_user" in (row.error or "")
    # One notice, with the first question over the limit, replying to it; none for the next.
    notices = [p for p in world.forum.created if p.raw == LIMIT_NOTICE]
    assert len(notices) == 1
    assert world.row(942).reply_post_id == notices[0].id
    assert world.row(943).reply_post_id is None
    assert len(world.forum.created) == 2
    assert _unanswered("denied", "limit.per_user") == before + 2


def test_with_the_bot_off_a_question_is_denied_disabled_and_told_only_when_notices_are_on(
    world: World,
) -> None:
    world.forum.flags_on(enabled=False)
    world.ask(951, 1, QUESTION)
    assert world.pipeline.run(951).state == "denied"
    assert world.forum.created == []
    world.forum.settings["citebot_refusal_notice"] = "short"
    world.pipeline.flags = FlagReader(world.forum.get_site_settings, world.settings.flags)
    world.ask(952, 1, "@citebot and shadow acne?", post_number=4)
    assert world.pipeline.run(952).state == "denied"
    assert [p.raw for p in world.forum.created] == [OFF_NOTICE]
    for post_id in (951, 952):
        assert (world.row(post_id).state, world.row(post_id).reason) == ("denied", "disabled")
    assert world.row(952).reply_post_id == world.forum.created[0].id


def test_a_pm_to_the_bot_while_pms_are_off_is_denied_and_its_first_post_told(world: World) -> None:
    world.forum.settings["citebot_refusal_notice"] = "short"
    world.forum.add_topic(60, "A private question", "a-private-question", None)
    world.forum.set_topic(60, archetype="private_message", allowed_users=("member", "citebot"))
    world.ask(961, 60, "how do I stop shadow flicker? (private)", post_number=1)
    world.ask(962, 60, "hello? anyone?", post_number=2)
    world.forum.add_topic(61, "Between two members", "between-two-members", None)
    world.forum.set_topic(61, archetype="private_message", allowed_users=("member", "bob"))
    world.ask(963, 61, "@citebot how do I stop shadow flicker?", post_number=1)
    for post_id in (961, 962, 963):
        assert world.pipeline.run(post_id).state == "denied"
        assert world.row(post_id).reason == "summon.pm_disabled"
    # The member wrote to the bot: told once, in that PM; the rest of it, and a PM the bot is not in,
    # get nothing.
    assert [(p.topic_id, p.raw) for p in world.forum.created] == [(60, PM_NOTICE)]
    assert world.row(961).reply_post_id == world.forum.created[0].id
    assert world.row(962).reply_post_id is None
    assert world.row(963).reply_post_id is None


def test_citebot_answers_lists_the_questions_without_an_answer_and_why(
    world: World, redis_client: RedisClients, redis_url: str, db_url: str
) -> None:
    _limited(world, redis_client, redis_url, per_user=1)
    world.ask(971, 1, QUESTION)
    world.ask(972, 1, "@citebot and shadow acne?", post_number=4)
    world.pipeline.run(971)
    world.pipeline.run(972)
    env = {**os.environ, "CITEBOT_DATABASE__URL": db_url}

    def answers_cli(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "worker.app.cli", "answers", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = answers_cli("--unanswered")
    assert "not answered: denied limit.per_user 1" in out
    assert "post 972  topic 1  denied limit.per_user  no reply" in out
    assert "post 971 " not in out
    assert "post 972 " in answers_cli("--reason", "limit")  # a prefix matches limit.per_user
    assert answers_cli("--reason", "summon", "--json") == ""
    assert '"reason": "limit.per_user"' in answers_cli("--state", "denied", "--json")
