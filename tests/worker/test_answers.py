from __future__ import annotations

import threading

import psycopg
import pytest

from worker import answers
from worker.question import EarlierAnswer

pytestmark = pytest.mark.integration


def test_claim_creates_one_queued_row(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert answers.claim(conn, 10, 3, 2, 1, 42, "alice", "webhook") is True
        assert answers.claim(conn, 10, 3, 2, 1, 42, "alice", "poller") is False
        row = answers.get(conn, 10)
        assert row is not None
        assert (row.state, row.topic_id, row.post_number, row.username, row.enqueued_by) == (
            "queued",
            3,
            2,
            "alice",
            "webhook",
        )
        assert answers.get(conn, 11) is None
        assert answers.existing(conn, [10, 11]) == {10}
        assert answers.existing(conn, []) == set()
        assert conn.execute("SELECT count(*) FROM answers").fetchone() == (1,)


def test_record_author_fills_in_a_webhook_claim(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        answers.claim(conn, 20, 3, None, 1, None, None, "webhook")
        answers.record_author(conn, 20, 42, "alice", 5)
        row = answers.get(conn, 20)
        assert row is not None
        assert (row.user_id, row.username, row.post_number, row.state) == (42, "alice", 5, "queued")


def test_concurrent_claims_have_one_winner(db_url: str) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            barrier.wait()
            results.append(answers.claim(conn, 99, 1, 1, 1, 5, "bob", "webhook"))

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]


def test_transition_is_conditional_and_sets_fields(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        answers.claim(conn, 10, 3, 2, 1, 42, "alice", "webhook")
        assert answers.transition(conn, 10, ["queued"], "retrieved", trace={"stages": [1]}, attempts=1)
        # a second worker holding the same message loses the race
        assert not answers.transition(conn, 10, ["queued"], "retrieved")
        assert answers.transition(conn, 10, ["retrieved"], "posted", reply_post_id=500, sources=[{"n": 1}])
        row = answers.get(conn, 10)
        assert row is not None
        assert (row.state, row.reply_post_id, row.sources, row.trace, row.attempts) == (
            "posted",
            500,
            [{"n": 1}],
            {"stages": [1]},
            1,
        )
        assert not answers.transition(conn, 404, ["queued"], "failed")


def test_concurrent_transitions_have_one_winner(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        answers.claim(conn, 7, 3, 2, 1, 42, "alice", "webhook")
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def attempt() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            barrier.wait()
            results.append(answers.transition(conn, 7, ["queued"], "retrieved"))

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]


def test_transition_rejects_unknown_states_and_fields(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(ValueError, match="unknown state"):
            answers.transition(conn, 1, ["queued"], "done")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="from_states"):
            answers.transition(conn, 1, [], "posted")
        with pytest.raises(ValueError, match="cannot set"):
            answers.transition(conn, 1, ["queued"], "posted", username="x")


def test_states_match_the_schema(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'answers_state_check'"
        ).fetchone()
    assert row is not None
    for state in answers.STATES:
        assert f"'{state}'" in row[0]


def _answered(conn: psycopg.Connection[object], post_id: int, number: int, user: int, reply: int) -> None:
    answers.claim(conn, post_id, 7, number, 1, user, f"user{user}", "webhook")
    sources = [{"n": 1, "post_id": 900 + post_id}, {"n": 2, "post_id": 950 + post_id}]
    trace = {"stages": [{"name": "sanitize", "info": {"cited": [2]}}]}
    answers.transition(conn, post_id, ["queued"], "posted", sources=sources, trace=trace)
    answers.transition(conn, post_id, ["posted"], "posted", reply_post_number=reply)


def test_earlier_is_the_answer_pointed_at_else_the_members_latest_with_only_what_it_cited(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _answered(conn, 1, 1, 42, 2)  # alice asks (#1), the bot answers (#2)
        _answered(conn, 3, 3, 43, 4)  # bob asks (#3), the bot answers (#4)
        _answered(conn, 5, 5, 42, 6)  # alice again (#5), the bot (#6)
        pointed = answers.earlier(conn, 7, 8, 43, pointed=[2])
        assert pointed == EarlierAnswer(1, 1, 2, (951,))  # a reply to the bot's #2: that answer
        assert answers.earlier(conn, 7, 8, 42) == EarlierAnswer(5, 5, 6, (955,))  # alice's latest
        assert answers.earlier(conn, 7, 5, 42) == EarlierAnswer(1, 1, 2, (951,))  # only earlier posts
        assert answers.earlier(conn, 7, 8, 99) is None  # the bot never answered this member here
        assert answers.earlier(conn, 8, 8, 42) is None  # another topic


def test_cited_posts_without_a_sanitize_trace_are_every_source() -> None:
    assert answers.cited_posts([{"n": 1, "post_id": 5}, {"n": 2, "post_id": 6}], {}) == (5, 6)
    assert answers.cited_posts(None, None) == ()
