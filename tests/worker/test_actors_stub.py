"""The actors on dramatiq's ``StubBroker`` and a ``Worker``: retries, last attempts, Retry-After, the index
actors and the intake, with no Redis and no PostgreSQL (the answers are a ``FakeAnswerStore``).

The broker carries citebot's own middleware (``worker.broker.broker_middleware``), so the retry budget in
the actors' options and ``CurrentMessage`` act as on the Redis broker; ``tests/worker/test_actors.py``
runs the same paths on Redis and PostgreSQL in the integration tier.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Middleware

from worker.actors import Actors, DramatiqIntake, declare_actors
from worker.broker import broker_middleware
from worker.domain import Delivery
from worker.errors import PermanentError, RateLimitedError, ServiceUnavailableError, ValidationError
from worker.runtime import Once, Runtime
from worker.settings import Settings
from worker.testing.answers import FakeAnswerStore

LIMITS = {"max_retries": 2, "min_backoff_s": 0.01, "max_backoff_s": 0.05}


class StoreAnswerer:
    """The ``Answerer`` contract over a ``FakeAnswerStore``: claims the row, acts on an open one (queued →
    posted) or raises the next scripted error; ``calls`` are the deliveries that found the row open."""

    def __init__(self, store: FakeAnswerStore, script: list[Exception | None]) -> None:
        self.store = store
        self.script = script
        self.calls: list[int] = []
        self.last_attempts: list[bool] = []

    def answer(self, delivery: Delivery, *, last_attempt: bool = False) -> None:
        self.store.claim_delivery(delivery)
        row = self.store.get(delivery.post_id)
        if row is None or row.state != "queued":
            return
        self.calls.append(delivery.post_id)
        self.last_attempts.append(last_attempt)
        step = self.script.pop(0) if self.script else None
        if step is not None:
            raise step
        self.store.transition(delivery.post_id, ["queued"], "posted", reply_post_id=1)


@dataclass
class RecordingIndexer:
    """The ``Indexer`` protocol, recording each call."""

    calls: list[tuple[str, object]] = field(default_factory=list)

    def refresh_post(self, post_id: int, event: str) -> None:
        self.calls.append(("post", (post_id, event)))

    def refresh_topic(self, topic_id: int, event: str) -> None:
        self.calls.append(("topic", (topic_id, event)))

    def refresh_category(self, category_id: int, event: str) -> None:
        self.calls.append(("category", (category_id, event)))

    def sync_categories(self) -> str:
        self.calls.append(("sync", None))
        return "categories: 3 recorded"

    def backfill(self, kind: str, *, path: Path | None = None, source_url: str | None = None) -> str:
        self.calls.append(("backfill", (kind, path, source_url)))
        return "backfill: 0 changed"


@dataclass
class FakeRuntime:
    """What the actor bodies read of a ``Runtime``: settings, the answerer, the indexer."""

    settings: Settings
    answerer: StoreAnswerer | None
    indexer: Once[RecordingIndexer]


class Delays(Middleware):
    """Records the delay of every retry, by actor (a delayed message moved back from the delay queue is
    enqueued again without a delay: not counted)."""

    def __init__(self) -> None:
        self.retries: list[tuple[str, int]] = []

    def before_enqueue(
        self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None
    ) -> None:
        if message.options.get("retries") and delay is not None:
            self.retries.append((message.actor_name, delay))


class Harness:
    def __init__(self, script: list[Exception | None], *, answers: bool = True) -> None:
        self.settings = Settings(limits=LIMITS)  # type: ignore[arg-type]
        self.store = FakeAnswerStore()
        self.answerer = StoreAnswerer(self.store, script)
        self.indexer = RecordingIndexer()
        self.runtime = FakeRuntime(
            self.settings, self.answerer if answers else None, Once(lambda: self.indexer)
        )
        self.broker = StubBroker(middleware=broker_middleware())
        self.delays = Delays()
        self.broker.add_middleware(self.delays)
        self.built = 0

        def runtime() -> Runtime:
            self.built += 1
            return cast(Runtime, self.runtime)

        self.actors: Actors = declare_actors(self.broker, runtime, self.settings.limits)
        self.worker = dramatiq.Worker(self.broker, worker_timeout=50, worker_threads=1)

    def run(self, *queues: str) -> None:
        """Work until every queue named is drained (messages that failed for good are dead letters)."""
        self.worker.start()
        try:
            for queue in queues:
                self.broker.join(queue, timeout=20_000, fail_fast=False)
            self.worker.join()
        finally:
            self.worker.stop()

    def dead(self, queue: str) -> list[str]:
        return [m.actor_name for m in self.broker.dead_letters_by_queue[queue]]


@pytest.fixture
def harness() -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(script: list[Exception | None], **kwargs: Any) -> Harness:
        h = Harness(script, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.broker.close()


def test_three_deliveries_make_one_row_and_one_answer(harness: Callable[..., Harness]) -> None:
    h = harness([])
    for _ in range(3):
        h.actors.answer_question.send(501, 9, 1)
    h.run("questions")
    assert [(r.post_id, r.state, r.enqueued_by) for r in h.store.rows.values()] == [
        (501, "posted", "webhook")
    ]
    assert h.answerer.calls == [501]
    assert h.dead("questions") == []


def test_transient_errors_retry_with_backoff_and_retry_after(harness: Callable[..., Harness]) -> None:
    h = harness([ServiceUnavailableError("down"), RateLimitedError("slow", retry_after=0.03)])
    h.actors.answer_question.send(601, 9, 1)
    h.run("questions")
    assert h.answerer.calls == [601, 601, 601]
    assert h.store.states_of([601]) == {601: "posted"}
    assert len(h.delays.retries) == 2
    backoff, retry_after = (delay for _, delay in h.delays.retries)
    assert 0 < backoff <= 50  # exponential backoff capped by max_backoff_s
    assert retry_after == 30  # the 429's Retry-After, within [min_backoff_s, max_backoff_s]


def test_a_permanent_error_is_never_retried(harness: Callable[..., Harness]) -> None:
    h = harness([ValidationError("bad"), None])
    h.actors.answer_question.send(602, 9, 1)
    h.run("questions")
    assert h.answerer.calls == [602]
    assert h.store.states_of([602]) == {602: "queued"}
    assert h.delays.retries == []
    assert h.dead("questions") == ["answer_question"]


def test_retries_stop_at_max_retries_and_the_last_attempt_knows(harness: Callable[..., Harness]) -> None:
    h = harness([ServiceUnavailableError("down")] * 10)
    h.actors.answer_question.send(701, 9, 1)
    h.run("questions")
    assert h.answerer.calls == [701] * 3  # first try + max_retries=2
    assert h.answerer.last_attempts == [False, False, True]  # from dramatiq's own count (CurrentMessage)
    assert h.store.states_of([701]) == {701: "queued"}
    assert h.dead("questions") == ["answer_question"]


def test_a_process_without_an_answerer_refuses_permanently(harness: Callable[..., Harness]) -> None:
    h = harness([], answers=False)
    h.actors.answer_question.send(801, 9, 1)
    h.run("questions")
    assert h.dead("questions") == ["answer_question"]
    assert h.delays.retries == []
    assert h.store.rows == {}


def test_declaring_and_sending_build_no_runtime(harness: Callable[..., Harness]) -> None:
    h = harness([])
    intake = DramatiqIntake(h.actors)
    with intake.outbox() as pending:  # a StubBroker sends at once: nothing is collected
        intake.question(5, 6, 2)
        intake.question(5, 6, 2, reply_to=3)
        intake.refresh_post(5, "post_edited")
        intake.refresh_topic(6, "topic_edited")
        intake.refresh_category(7, "category_updated")
        intake.refresh_post(5, "reviewable", delay_s=10.0)  # a reviewable's second look, after the hide
    assert pending == []
    assert h.built == 0
    assert h.broker.queues["questions"].qsize() == 2
    assert h.broker.queues["index"].qsize() == 3
    assert h.broker.queues["index.DQ"].qsize() == 1
    questions = [h.broker.queues["questions"].get() for _ in range(2)]
    decoded = [dramatiq.Message.decode(q) for q in questions]
    assert [(m.actor_name, m.args) for m in decoded] == [
        ("answer_question", (5, 6, 2, "webhook")),
        ("answer_question", (5, 6, 2, "webhook", 3)),
    ]


def test_the_index_and_maintenance_actors_call_the_indexer(harness: Callable[..., Harness]) -> None:
    h = harness([])
    h.actors.refresh_post.send(5, "post_edited")
    h.actors.refresh_topic.send(6, "topic_destroyed")
    h.actors.refresh_category.send(7, "category_updated")
    h.actors.sync_categories.send()
    h.actors.backfill_tick.send("file", "/data/export.json")
    h.run("index", "maintenance")
    assert sorted(h.indexer.calls, key=str) == sorted(
        [
            ("post", (5, "post_edited")),
            ("topic", (6, "topic_destroyed")),
            ("category", (7, "category_updated")),
            ("sync", None),
            ("backfill", ("file", Path("/data/export.json"), None)),
        ],
        key=str,
    )
    assert h.dead("index") == []
    assert h.dead("maintenance") == []


def test_an_index_refresh_honours_retry_after_and_stops_on_permanent_errors(
    harness: Callable[..., Harness],
) -> None:
    h = harness([])
    failures: list[Exception] = [RateLimitedError("slow", retry_after=0.02), PermanentError("gone")]
    lock = threading.Lock()

    def refresh_post(post_id: int, event: str) -> None:
        with lock:
            step = failures.pop(0) if failures else None
        h.indexer.calls.append(("post", (post_id, event)))
        if step is not None:
            raise step

    h.indexer.refresh_post = refresh_post  # type: ignore[method-assign]
    h.actors.refresh_post.send(5, "post_edited")
    h.run("index")
    assert h.indexer.calls == [("post", (5, "post_edited"))] * 2
    assert h.delays.retries == [("refresh_post", 20)]
    assert h.dead("index") == ["refresh_post"]
