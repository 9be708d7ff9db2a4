"""End to end with real Redis and Postgres: a member's post on the local forum → signed webhook → webhook
app under uvicorn → Redis queue → a real dramatiq Worker → exactly one ``answers`` row; also when the
webhook is delivered three times, and when it is never delivered (the poller picks it up)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dramatiq
import httpx
import psycopg
import pytest
import redis as redis_lib
import redis.asyncio as aredis_lib

from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import serve
from tests.conftest import REDIS_NAMESPACE, RedisClients, make_settings
from tests.eval.forum.export import write_export
from worker.actors import Actors, DramatiqIntake, declare_actors, run_poll
from worker.app.assemble import lazy_runtime
from worker.app.webhook import create_app
from worker.broker import build_broker
from worker.runtime import Once, Runtime
from worker.settings import Settings
from worker.testing.answerer import ClaimingAnswerer
from worker.webhook_events import WEBHOOK_PATH

pytestmark = pytest.mark.integration

KEY = "e2e-forum-key"
SECRET = "e2e-webhook-secret"


@dataclass
class Stack:
    settings: Settings
    forum: ForumApp
    forum_url: str
    actors: Actors
    provider: Once[Runtime]
    db_url: str
    http: httpx.Client

    def member_posts(self, username: str, topic_id: int, raw: str) -> int:
        r = self.http.post(
            f"{self.forum_url}/posts.json",
            headers={"Api-Key": KEY, "Api-Username": username},
            json={"topic_id": topic_id, "raw": raw},
        )
        r.raise_for_status()
        return int(r.json()["id"])

    def redeliver(self, event_id: int) -> None:
        r = self.http.post(
            f"{self.forum_url}/__forum/webhooks/{event_id}/redeliver", headers={"Api-Key": KEY}
        )
        r.raise_for_status()
        assert self.forum.webhooks.flush()

    def rows(self) -> list[tuple[int, str, str]]:
        with psycopg.connect(self.db_url) as conn:
            return [
                (int(r[0]), str(r[1]), str(r[2]))
                for r in conn.execute("SELECT post_id, state, enqueued_by FROM answers ORDER BY post_id")
            ]

    def poll(self) -> int:
        def enqueue(post_id: int, topic_id: int, version: int) -> None:
            self.actors.answer_question.send(post_id, topic_id, version, "poller")

        return run_poll(self.provider(), enqueue).enqueued


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def queue_empty(redis_url: str) -> bool:
    with redis_lib.Redis.from_url(redis_url) as r:
        return r.llen(f"{REDIS_NAMESPACE}-tasks:questions") == 0


@pytest.fixture
def stack(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    store = ForumStore(db_url)
    load_export(store, write_export(tmp_path / "export"))
    settings_base = make_settings(db_url, redis_url)
    broker = build_broker(settings_base.redis)
    # The runtime's settings need the forum's URL, known once it serves; the provider is lazy anyway.
    provider_ref: list[Once[Runtime]] = []

    def provider() -> Runtime:
        return provider_ref[0]()

    actors = declare_actors(broker, provider, settings_base.limits)
    webhook_app = create_app(
        make_settings(db_url, redis_url, discourse={"webhook_secret": SECRET}),
        DramatiqIntake(actors),
        aredis_lib.Redis.from_url(redis_url),
    )
    with serve(webhook_app) as webhook_url:
        forum = create_forum_app(
            store, ForumConfig(api_key=KEY, webhook_url=webhook_url + WEBHOOK_PATH, webhook_secret=SECRET)
        )
        with serve(forum.app) as forum_url:
            settings = make_settings(
                db_url,
                redis_url,
                discourse={
                    "base_url": forum_url,
                    "api_key": KEY,
                    "api_username": "citebot",
                    "webhook_secret": SECRET,
                },
            )
            # The answerer claims the row (the pipeline's first step) and answers nothing.
            runtime_provider = lazy_runtime(settings, ClaimingAnswerer)
            provider_ref.append(runtime_provider)
            worker = dramatiq.Worker(broker, worker_timeout=100, worker_threads=2)
            worker.start()
            with httpx.Client(timeout=10) as http:
                try:
                    yield Stack(settings, forum, forum_url, actors, runtime_provider, db_url, http)
                finally:
                    worker.stop()
                    broker.close()
                    runtime_provider.close()
                    forum.close()
    store.close()


def test_member_question_reaches_the_worker_once(stack: Stack, redis_url: str) -> None:
    post_id = stack.member_posts("alice", 10, "@citebot how do I set the shader precision?")
    wait_for(lambda: stack.rows() == [(post_id, "queued", "webhook")])
    assert stack.forum.webhooks.flush()
    assert [d.status for d in stack.forum.webhooks.deliveries] == [200]
    # a member's post that does not address the bot makes no row
    stack.member_posts("bob", 10, "I have the same problem on my phone too.")
    assert stack.forum.webhooks.flush()
    wait_for(lambda: queue_empty(redis_url))
    assert stack.rows() == [(post_id, "queued", "webhook")]


def test_three_deliveries_of_one_webhook_make_one_row(
    stack: Stack, redis_url: str, redis_client: RedisClients
) -> None:
    post_id = stack.member_posts("carol", 11, "@citebot where is the FPS counter code?")
    wait_for(lambda: len(stack.rows()) == 1)
    stack.redeliver(1)
    stack.redeliver(1)
    assert [d.attempts for d in stack.forum.webhooks.deliveries] == [3]
    # and when the Redis dedupe key is gone (TTL, Redis restart), the database still holds the line
    r = redis_client(redis_url)
    for key in r.scan_iter(match=f"{REDIS_NAMESPACE}:*-seen:*"):
        r.delete(key)
    stack.redeliver(1)
    wait_for(lambda: queue_empty(redis_url))
    time.sleep(0.3)
    assert stack.rows() == [(post_id, "queued", "webhook")]


def test_dropped_webhook_is_caught_up_by_the_poller_once(stack: Stack, redis_url: str) -> None:
    stack.forum.faults.update({"drop_webhooks_next": 1})
    post_id = stack.member_posts("dave", 12, "@citebot why do my rigid bodies jitter?")
    assert stack.forum.webhooks.flush()
    assert [d.status for d in stack.forum.webhooks.deliveries] == ["dropped"]
    time.sleep(0.3)
    assert stack.rows() == []
    assert stack.poll() == 1
    wait_for(lambda: stack.rows() == [(post_id, "queued", "poller")])
    assert stack.poll() == 0  # a second poll finds the row
    stack.redeliver(1)  # the lost delivery finally arrives: still one row
    wait_for(lambda: queue_empty(redis_url))
    time.sleep(0.3)
    assert stack.rows() == [(post_id, "queued", "poller")]
