"""The ``AnswerStore`` contract: the in-memory ``FakeAnswerStore`` and ``PostgresAnswerStore`` over the
real ``answers`` table behave alike (the ``postgres`` case is in the integration tier)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client import REGISTRY

from worker.answer_store import AnswerStore, PostgresAnswerStore
from worker.domain import Delivery
from worker.retrieval.recall import single_connection
from worker.testing.answers import FakeAnswerStore


@pytest.fixture(params=["fake", pytest.param("postgres", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest) -> Iterator[AnswerStore]:
    if request.param == "fake":
        yield FakeAnswerStore()
        return
    db_url: str = request.getfixturevalue("db_url")
    with psycopg.connect(db_url, autocommit=True) as conn:
        yield PostgresAnswerStore(single_connection(conn))


def test_the_first_claim_creates_a_queued_row_and_later_ones_do_nothing(store: AnswerStore) -> None:
    assert store.claim_delivery(Delivery(10, 1, 2, "webhook"))
    assert not store.claim_delivery(Delivery(10, 1, 3, "poller"))
    assert not store.claim(10, 1, 4, 1, 7, "ann", "poller")
    row = store.get(10)
    assert row is not None
    assert (row.post_id, row.topic_id, row.post_version, row.state, row.enqueued_by) == (
        10,
        1,
        2,
        "queued",
        "webhook",
    )
    assert (row.post_number, row.user_id, row.username, row.reason, row.error) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert (row.sources, row.trace, row.attempts) == ([], {}, 0)
    assert row.created_at == row.updated_at
    assert store.get(11) is None


def test_existing_and_states_of_read_only_rows_that_exist(store: AnswerStore) -> None:
    store.claim(1, 1, 1, 1, None, None, "webhook")
    store.claim(2, 1, 2, 1, None, None, "webhook")
    store.transition(2, ["queued"], "retrieved")
    assert store.existing([1, 2, 3]) == {1, 2}
    assert store.existing([]) == set()
    assert store.states_of([1, 2, 3]) == {1: "queued", 2: "retrieved"}
    assert store.states_of([]) == {}


def test_a_transition_moves_only_from_the_named_states(store: AnswerStore) -> None:
    store.claim(5, 1, 1, 1, None, None, "webhook")
    before = store.get(5)
    assert before is not None
    assert not store.transition(5, ["retrieved"], "generated")
    assert store.transition(5, ["queued"], "retrieved", zone="normal", sources=({"n": 1},), trace={"k": 25})
    assert not store.transition(5, ["queued"], "retrieved")  # a second worker loses the race
    assert not store.transition(404, ["queued"], "retrieved")
    row = store.get(5)
    assert row is not None
    assert (row.state, row.zone, row.sources, row.trace) == ("retrieved", "normal", [{"n": 1}], {"k": 25})
    assert row.updated_at > before.updated_at
    assert row.created_at == before.created_at


def test_a_transition_refuses_unknown_states_and_fields(store: AnswerStore) -> None:
    store.claim(6, 1, 1, 1, None, None, "webhook")
    with pytest.raises(ValueError, match="unknown state"):
        store.transition(6, ["queued"], "lost")  # type: ignore[list-item, arg-type]
    with pytest.raises(ValueError, match="from_states"):
        store.transition(6, ["nowhere"], "posted")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="from_states"):
        store.transition(6, [], "posted")
    with pytest.raises(ValueError, match="cannot set"):
        store.transition(6, ["queued"], "posted", state="posted")
    row = store.get(6)
    assert row is not None
    assert row.state == "queued"


def test_a_move_into_an_unanswered_state_is_counted_once(store: AnswerStore) -> None:
    def count() -> float:
        return (
            REGISTRY.get_sample_value(
                "citebot_unanswered_total", {"state": "denied", "reason": "limit.per_user"}
            )
            or 0.0
        )

    before = count()
    store.claim(7, 1, 1, 1, None, None, "webhook")
    assert store.transition(7, ["queued"], "denied", reason="limit.per_user")
    assert store.transition(7, ["denied"], "denied", error="again")  # staying there is no new count
    assert count() == before + 1


def test_author_error_and_bot_reply(store: AnswerStore) -> None:
    store.claim(8, 3, None, 1, None, None, "webhook")
    store.record_author(8, 42, "ann", 5)
    store.record_error(8, "timeout")
    store.record_author(404, 1, "nobody", 1)  # no row: nothing happens
    row = store.get(8)
    assert row is not None
    assert (row.user_id, row.username, row.post_number, row.error, row.state) == (
        42,
        "ann",
        5,
        "timeout",
        "queued",
    )
    assert not store.is_bot_reply(3, 6)
    store.transition(8, ["queued"], "posted", reply_post_id=900, reply_post_number=6)
    assert store.is_bot_reply(3, 6)
    assert not store.is_bot_reply(3, 5)
    assert not store.is_bot_reply(4, 6)


def test_recent_lists_newest_first_with_filters(store: AnswerStore) -> None:
    for post_id in (1, 2, 3, 4):
        store.claim(post_id, 1, post_id, 1, None, None, "webhook")
    store.transition(2, ["queued"], "denied", reason="summon.not_addressed")
    store.transition(3, ["queued"], "skipped", reason="post_gone")
    store.transition(1, ["queued"], "posted")
    assert [r.post_id for r in store.recent()] == [1, 3, 2, 4]
    assert [r.post_id for r in store.recent(limit=2)] == [1, 3]
    assert [r.post_id for r in store.recent("queued")] == [4]
    assert [r.post_id for r in store.recent(reason="summon")] == [2]
    assert [r.post_id for r in store.recent(reason="post_gone")] == [3]
    assert [r.post_id for r in store.recent(reason="post")] == []  # a prefix is no reason
    assert [r.post_id for r in store.recent(unanswered=True)] == [3, 2]
    assert store.count_by_state() == {"denied": 1, "posted": 1, "queued": 1, "skipped": 1}
    assert store.count_unanswered() == {("denied", "summon.not_addressed"): 1, ("skipped", "post_gone"): 1}


def test_claim_stale_resends_open_rows_once_per_period(store: AnswerStore) -> None:
    store.claim(1, 10, 1, 3, None, None, "webhook")
    store.claim(2, 20, 1, None, None, None, "webhook")
    store.claim(3, 30, 1, 1, None, None, "webhook")
    store.transition(3, ["queued"], "posted")
    store.claim(4, 40, 1, 1, None, None, "webhook")
    store.transition(4, ["queued"], "held", reason="settings_unreadable")
    # Nothing is older than an hour; every open row is older than nothing.
    assert store.claim_stale(3600, 3600) == []
    assert store.claim_stale(0, 3600) == [(1, 10, 3), (2, 20, 1), (4, 40, 1)]
    assert store.claim_stale(0, 3600, limit=1) in ([(1, 10, 3)], [(2, 20, 1)], [(4, 40, 1)])
    # Rows created longer ago than newer_than_s are no longer re-sent, except a held one.
    assert store.claim_stale(0, 0) == [(4, 40, 1)]
