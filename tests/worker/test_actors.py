from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import dramatiq
import psycopg
import pytest

from tests.conftest import RedisClients, make_settings
from worker import answers
from worker.actors import Actors, declare_actors, honour_retry_after, is_last_attempt, retry_options
from worker.app.assemble import lazy_runtime
from worker.broker import build_broker
from worker.domain import Delivery
from worker.errors import PermanentError, RateLimitedError, ServiceUnavailableError, ValidationError
from worker.runtime import Runtime
from worker.settings import LimitsSettings, Settings
from worker.testing.answerer import ClaimingAnswerer

pytestmark = pytest.mark.integration


class RecordingAnswerer(ClaimingAnswerer):
    """Claims the row (the ``Answerer`` contract), then moves an open one queued → posted or raises what
    it is told to; ``calls`` are the deliveries that found the row open."""

    def __init__(self, runtime: Runtime, script: list[Exception | None], delay_s: float = 0.0) -> None:
        super().__init__(runtime)
        self.script = script
        self.delay_s = delay_s
        self.last_attempts: list[bool] = []

    @property
    def calls(self) -> list[int]:
        return self.open_calls

    def answer(self, delivery: Delivery, *, last_attempt: bool = False) -> None:
        if self.claim(delivery) is None:
            return
        self.last_attempts.append(last_attempt)
        time.sleep(self.delay_s)
        step = self.script.pop(0) if self.script else None
        if step is not None:
            raise step
        with self.runtime.pool.connection() as conn:
            answers.transition(conn, delivery.post_id, ["queued"], "posted", reply_post_id=1)


MakeHarness = Callable[[list[Exception | None]], "Harness"]


class Harness:
    def __init__(
        self, settings: Settings, script: list[Exception | None], *, threads: int = 1, delay_s: float = 0.0
    ) -> None:
        self.answerers: list[RecordingAnswerer] = []

        def factory(rt: Runtime) -> RecordingAnswerer:
            a = RecordingAnswerer(rt, script, delay_s)
            self.answerers.append(a)
            return a

        self.broker = build_broker(settings.redis)
        self.provider = lazy_runtime(settings, factory)
        self.actors: Actors = declare_actors(self.broker, self.provider, settings.limits)
        self.worker = dramatiq.Worker(self.broker, worker_timeout=100, worker_threads=threads)

    @property
    def calls(self) -> list[int]:
        return [c for a in self.answerers for c in a.calls]

    def run(self) -> None:
        self.worker.start()
        try:
            self.broker.join("questions", timeout=20_000)
            self.worker.join()
        finally:
            self.worker.stop()

    def close(self) -> None:
        self.broker.close()
        self.provider.close()


@pytest.fixture
def fast_settings(db_url: str, redis_url: str) -> Settings:
    return make_settings(
        db_url, redis_url, limits={"max_retries": 2, "min_backoff_s": 0.05, "max_backoff_s": 0.2}
    )


@pytest.fixture
def harness_factory(fast_settings: Settings) -> Iterator[Callable[[list[Exception | None]], Harness]]:
    made: list[Harness] = []

    def make(script: list[Exception | None]) -> Harness:
        h = Harness(fast_settings, script)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def rows(db_url: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(db_url) as conn:
        return [
            (int(r[0]), str(r[1]), str(r[2]))
            for r in conn.execute("SELECT post_id, state, enqueued_by FROM answers")
        ]


def test_three_deliveries_make_one_row_and_one_answer(harness_factory: MakeHarness, db_url: str) -> None:
    h = harness_factory([])
    for _ in range(3):
        h.actors.answer_question.send(501, 9, 1)
    h.run()
    assert rows(db_url) == [(501, "posted", "webhook")]
    assert h.calls == [501]


def test_transient_errors_retry_and_permanent_ones_do_not(harness_factory: MakeHarness, db_url: str) -> None:
    h = harness_factory([ServiceUnavailableError("down"), RateLimitedError("slow", retry_after=0.01)])
    h.actors.answer_question.send(601, 9, 1)
    h.run()
    assert h.calls == [601, 601, 601]
    assert rows(db_url) == [(601, "posted", "webhook")]

    h2 = harness_factory([ValidationError("bad"), None])
    h2.actors.answer_question.send(602, 9, 1)
    h2.run()
    assert h2.calls == [602]
    assert (602, "queued", "webhook") in rows(db_url)


def test_retries_stop_at_max_retries(harness_factory: MakeHarness, db_url: str) -> None:
    h = harness_factory([ServiceUnavailableError("down")] * 10)
    h.actors.answer_question.send(701, 9, 1)
    h.run()
    assert h.calls == [701] * 3  # first try + max_retries=2
    # The answerer hears from dramatiq's own count which attempt is the last one.
    assert [a for r in h.answerers for a in r.last_attempts] == [False, False, True]
    assert rows(db_url) == [(701, "queued", "webhook")]


def test_declaring_actors_opens_nothing(redis_url: str) -> None:
    settings = make_settings("postgresql://nobody@127.0.0.1:1/none", redis_url)
    broker = build_broker(settings.redis)
    built = threading.Event()

    def runtime() -> Runtime:
        built.set()
        raise AssertionError("runtime must not be built at declaration")

    actors = declare_actors(broker, runtime, settings.limits)
    assert {a.actor_name for a in (actors.answer_question, actors.poll_notifications)} == {
        "answer_question",
        "poll_notifications",
    }
    assert not built.is_set()
    broker.close()


def test_retry_budget_is_the_actor_options_and_retry_after() -> None:
    limits = LimitsSettings(max_retries=3, min_backoff_s=1, max_backoff_s=60)  # type: ignore[call-arg]
    assert retry_options(limits) == {
        "max_retries": 3,
        "min_backoff": 1000,
        "max_backoff": 60_000,
        "throws": (PermanentError,),
    }
    assert not is_last_attempt(limits)  # outside an actor nothing says so

    def limited() -> None:
        raise RateLimitedError("slow", retry_after=30)

    with pytest.raises(dramatiq.Retry) as info:
        honour_retry_after(limits, limited)
    assert info.value.delay == 30_000

    def very_limited() -> None:
        raise RateLimitedError("slow", retry_after=3600)

    with pytest.raises(dramatiq.Retry) as info:
        honour_retry_after(limits, very_limited)
    assert info.value.delay == 60_000

    def plain() -> None:
        raise ServiceUnavailableError("x")

    with pytest.raises(ServiceUnavailableError):
        honour_retry_after(limits, plain)


def test_intake_enqueues_ids_for_questions_and_index_refreshes(
    redis_url: str, redis_client: RedisClients
) -> None:
    from tests.conftest import REDIS_NAMESPACE
    from worker.actors import DramatiqIntake

    settings = make_settings("postgresql://nobody@127.0.0.1:1/none", redis_url)
    broker = build_broker(settings.redis)

    def runtime() -> Runtime:
        raise AssertionError("not called when only enqueueing")

    intake = DramatiqIntake(declare_actors(broker, runtime, settings.limits))
    intake.question(5, 6, 2)
    intake.refresh_post(5, "post_edited")
    intake.refresh_topic(6, "topic_edited")
    intake.refresh_category(7, "category_updated")
    intake.refresh_post(5, "reviewable", delay_s=10.0)  # a reviewable's second look, after the hide
    r = redis_client(redis_url)
    assert r.llen(f"{REDIS_NAMESPACE}-tasks:questions") == 1
    assert r.llen(f"{REDIS_NAMESPACE}-tasks:index") == 3
    assert r.llen(f"{REDIS_NAMESPACE}-tasks:index.DQ") == 1  # the delay queue
    broker.close()
