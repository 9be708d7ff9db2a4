from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import redis as redis_lib

from tests.conftest import REDIS_NAMESPACE, RedisClients
from worker import answers
from worker.addressing import BotIdentity
from worker.dedupe import question_key
from worker.domain import ForumPost, Notification, NotificationKind
from worker.poller import poll_once
from worker.testing.forum import FakeForum

pytestmark = pytest.mark.integration

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
BOT = BotIdentity("citebot")


class Forum(FakeForum):
    """The shipped ``FakeForum``, with the tests' topic 9 and a helper that adds a post and its
    notification in one call."""

    def __init__(self) -> None:
        super().__init__()
        self.add_topic(9, "Topic 9", "topic-9")

    def add(
        self,
        post_id: int,
        raw: str,
        *,
        kind: NotificationKind = "mentioned",
        age_s: int = 60,
        **fields: object,
    ) -> None:
        base = ForumPost(
            id=post_id, topic_id=9, post_number=post_id % 100, username="alice", user_id=4, raw=raw
        )
        post = self.posts[post_id] = dataclasses.replace(base, **fields)  # type: ignore[arg-type]
        self.notify(post, kind, (NOW - timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z"))


def run(forum: Forum, conn: psycopg.Connection, r: redis_lib.Redis, sent: list[tuple[int, int, int]]):  # type: ignore[no-untyped-def]
    return poll_once(
        forum,
        conn,
        r,
        lambda p, t, v: sent.append((p, t, v)),
        bot=BOT,
        namespace=REDIS_NAMESPACE,
        lookback_s=3600,
        dedupe_ttl_s=600,
        stale_after_s=900,
        now=NOW,
    )


def test_poll_enqueues_missed_questions_once(db_url: str, redis_url: str, redis_client: RedisClients) -> None:
    forum = Forum()
    forum.add(101, "@citebot first question")
    forum.add(102, "thanks!", kind="replied", reply_to_username="citebot")
    forum.add(103, "@citebot old question", age_s=7200)
    forum.add(104, "edited: no longer asks", kind="mentioned")
    forum.add(105, "@citebot hidden", hidden=True)
    forum.add(106, "@citebot liked", kind="other")
    forum.notifications.append(
        Notification(99, "mentioned", 9, 7, 107, NOW.isoformat())
    )  # post deleted since
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        report = run(forum, conn, r, sent)
        assert sorted(sent) == [(101, 9, 1), (102, 9, 1)]
        assert (report.enqueued, report.too_old, report.not_addressed) == (2, 1, 3)
        assert answers.get(conn, 101) is not None
        assert answers.get(conn, 101).enqueued_by == "poller"  # type: ignore[union-attr]
        again = run(forum, conn, r, sent)
        # Claimed and queued, not answered yet: in progress, not "answered".
        assert (again.enqueued, again.in_progress, again.answered) == (0, 2, 0)
    assert len(sent) == 2


def test_poll_answers_a_quoting_reply_to_the_bot_and_not_one_to_someone_else(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    # Discourse leaves reply_to_user out of a reply that quotes its parent (suppress_reply_when_quoting).
    forum = Forum()
    forum.add(302, "I am the bot's earlier answer.", kind="other", username="citebot", user_id=-5)
    forum.add(303, "[quote]...[/quote] and on iOS?", kind="replied", reply_to_post_number=2)
    forum.add(305, "a post by bob", kind="other", username="bob")
    forum.add(306, "[quote]...[/quote] me too", kind="replied", reply_to_post_number=5)
    forum.add(304, "[quote]...[/quote] recorded", kind="replied", reply_to_post_number=40)
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        # Post #40 is a reply the bot posted, as the answers table recorded it.
        answers.claim(conn, 399, 9, 39, 1, 4, "alice", "webhook")
        conn.execute("UPDATE answers SET reply_post_number = 40 WHERE post_id = 399")
        report = run(forum, conn, r, sent)
    assert sorted(sent) == [(303, 9, 1), (304, 9, 1)]
    assert report.not_addressed == 1
    assert forum.by_number_calls == 2  # #40 needed no call


def test_poll_skips_posts_whose_webhook_is_in_flight(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    forum = Forum()
    forum.add(201, "@citebot question")
    r = redis_client(redis_url)
    r.set(question_key(REDIS_NAMESPACE, 201, 1), b"1", ex=60)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        report = run(forum, conn, r, sent)
        assert (report.in_flight, report.enqueued, sent) == (1, 0, [])
        assert answers.get(conn, 201) is None


def test_failed_enqueue_leaves_no_row_and_no_key(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    forum = Forum()
    forum.add(301, "@citebot question")
    r = redis_client(redis_url)

    def broken(post_id: int, topic_id: int, version: int) -> None:
        raise redis_lib.ConnectionError("queue down")

    with psycopg.connect(db_url) as conn:
        with pytest.raises(redis_lib.ConnectionError):
            poll_once(
                forum,
                conn,
                r,
                broken,
                bot=BOT,
                namespace=REDIS_NAMESPACE,
                lookback_s=3600,
                dedupe_ttl_s=600,
                stale_after_s=900,
                now=NOW,
            )
        assert answers.get(conn, 301) is None
        assert r.exists(question_key(REDIS_NAMESPACE, 301, 1)) == 0
        sent: list[tuple[int, int, int]] = []
        assert run(forum, conn, r, sent).enqueued == 1


def test_rows_whose_message_was_lost_are_resent_once_per_period(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    # No notification names them any more (they scrolled off the page): the rows themselves are read.
    forum = Forum()
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        for post_id in (401, 402, 403, 404, 405):
            answers.claim(conn, post_id, 9, 1, 3, 4, "alice", "webhook")
        answers.transition(conn, 402, ["queued"], "posted")
        answers.transition(conn, 404, ["queued"], "retrieved")  # its delayed retry was lost too
        conn.execute(
            "UPDATE answers SET updated_at = now() - interval '1 hour' WHERE post_id IN (401, 402, 404, 405)"
        )
        # 405 is older than the look-back: the poller leaves it alone.
        conn.execute("UPDATE answers SET created_at = now() - interval '1 day' WHERE post_id = 405")
        conn.commit()
        report = run(forum, conn, r, sent)
        assert (report.resent, report.enqueued, sent) == (2, 0, [(401, 9, 3), (404, 9, 3)])
        again = run(forum, conn, r, sent)
        assert again.resent == 0
    assert sent == [(401, 9, 3), (404, 9, 3)]


def test_poller_pages_back_through_the_look_back(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    # 150 newer notifications (already answered) bury a missed question on the third page.
    forum = Forum()
    forum.add(500, "@citebot buried question")
    for post_id in range(501, 651):
        forum.add(post_id, f"@citebot question {post_id}")
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        for post_id in range(501, 651):
            answers.claim(conn, post_id, 9, 1, 1, 4, "alice", "webhook")
        conn.commit()
        report = run(forum, conn, r, sent)
    assert report.seen == 151
    assert [p for p, _, _ in sent] == [500]


def test_the_report_counts_as_answered_only_what_was_answered_and_held_rows_are_sent_again(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    # issue 33: a question skipped or denied by a policy, or held because the flags could not be read,
    # was counted "answered".
    forum = Forum()
    for post_id in (701, 702, 703, 704, 705):
        forum.add(post_id, f"@citebot question {post_id}")
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        for post_id in (701, 702, 703, 704, 705):
            answers.claim(conn, post_id, 9, 1, 1, 4, "alice", "webhook")
        answers.transition(conn, 701, ["queued"], "posted")
        answers.transition(conn, 702, ["queued"], "denied", reason="limit.per_user")
        answers.transition(conn, 703, ["queued"], "skipped", reason="post_gone")
        answers.transition(conn, 704, ["queued"], "held", reason="settings_unreadable")
        # The held one's retries ran out long ago, and it was asked before the look-back.
        conn.execute(
            "UPDATE answers SET updated_at = now() - interval '1 hour',"
            " created_at = now() - interval '1 day' WHERE post_id = 704"
        )
        conn.commit()
        report = run(forum, conn, r, sent)
    assert (report.answered, report.not_answered, report.held, report.in_progress) == (1, 2, 1, 1)
    assert (report.resent, sent) == (1, [(704, 9, 1)])


def test_a_pm_to_the_bot_is_claimed_with_pms_off_for_the_worker_to_record_the_refusal(
    db_url: str, redis_url: str, redis_client: RedisClients
) -> None:
    # Discourse notifies the bot of a PM it is in (PostAlerter#notify_pm_users: "private_message"); the
    # webhook cannot tell (its topic_archetype names no participant), so the poller claims it and the
    # answer path records "denied", summon.pm_disabled (worker/summon.py).
    assert not BOT.answer_pms
    forum = Forum()
    forum.add(801, "hello bot, how do I stop shadow flicker?", kind="private_message", post_number=1)
    r = redis_client(redis_url)
    sent: list[tuple[int, int, int]] = []
    with psycopg.connect(db_url) as conn:
        report = run(forum, conn, r, sent)
        assert (report.enqueued, sent) == (1, [(801, 9, 1)])
        assert answers.get(conn, 801) is not None
