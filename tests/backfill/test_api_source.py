"""The ``api`` source over a fake Discourse at the transport (JSON shaped like the real API)."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from backfill.run import BackfillOptions, run_backfill
from backfill.sources.api import ApiSource
from worker.budget import ApiBudget
from worker.errors import AuthError
from worker.settings import DatabaseSettings, DiscourseSettings
from worker.testing.models import FakeEmbedder

TOPICS = {
    1: {"id": 1, "title": "Shadows", "slug": "shadows", "category_id": 4, "archetype": "regular",
        "visible": True, "deleted_at": None, "tags": [{"id": 1, "name": "rendering"}]},
    2: {"id": 2, "title": "Physics", "slug": "physics", "category_id": 4, "archetype": "regular",
        "visible": True, "deleted_at": None, "tags": ["bullet"]},
    3: {"id": 3, "title": "Moderation", "slug": "moderation", "category_id": 5, "archetype": "regular",
        "visible": True, "deleted_at": None, "tags": []},
}  # fmt: skip


class FakeDiscourse:
    """``/posts.json?before=`` (latest posts below an id, newest first), ``/t/{id}.json``, ``/site.json``."""

    def __init__(self) -> None:
        self.posts: dict[int, dict[str, Any]] = {
            i: {
                "id": i,
                "topic_id": 1 + (i - 1) // 3,
                "post_number": 1 + (i - 1) % 3,
                "cooked": f"<p>Post {i} text</p>",
                "post_type": 1,
                "username": "alice",
                "updated_at": "2024-01-01T00:00:00.000Z",
                "topic_slug": TOPICS[1 + (i - 1) // 3]["slug"],
                "topic_title": TOPICS[1 + (i - 1) // 3]["title"],
                "category_id": TOPICS[1 + (i - 1) // 3]["category_id"],
            }
            for i in range(1, 10)
        }
        self.requests: list[str] = []
        self.throttle_next = 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(str(request.url.copy_with(scheme="http", host="x")).removeprefix("http://x"))
        assert request.headers["Api-Key"] == "k" * 20
        if self.throttle_next:
            self.throttle_next -= 1
            body = {"errors": ["Slow down"], "error_type": "rate_limit", "extras": {"wait_seconds": 7}}
            return httpx.Response(429, json=body, headers={"Retry-After": "3"})
        path = request.url.path
        if path == "/site.json":
            return httpx.Response(200, json={"categories": [
                {"id": 4, "name": "Support", "read_restricted": False},
                {"id": 5, "name": "Staff", "read_restricted": True}]})  # fmt: skip
        if path == "/posts.json":
            before = int(request.url.params.get("before", 10**9))
            ids = sorted((i for i in self.posts if i < before), reverse=True)[:4]
            return httpx.Response(200, json={"latest_posts": [self.posts[i] for i in ids]})
        if path.startswith("/t/"):
            tid = int(path[3:].removesuffix(".json"))
            stream = [p for _i, p in sorted(self.posts.items()) if p["topic_id"] == tid][:20]
            return httpx.Response(200, json={**TOPICS[tid], "post_stream": {"posts": stream}})
        return httpx.Response(404, json={"errors": ["not found"], "error_type": "not_found"})


def make_source(fake: FakeDiscourse, sleeps: list[float]) -> ApiSource:
    settings = DiscourseSettings(
        base_url="http://forum.test",
        api_key="k" * 20,
        site_api_limit_per_minute=10_000,
        api_requests_per_minute=6000,
        api_burst=100,
    )  # type: ignore[call-arg,arg-type]
    http = httpx.Client(transport=httpx.MockTransport(fake.handler))
    now = [0.0]

    def sleep(seconds: float) -> None:  # a clock that moves only when the source sleeps
        sleeps.append(seconds)
        now[0] += seconds

    budget = ApiBudget(settings, sleep=sleep, clock=lambda: now[0])
    return ApiSource(http, settings, budget=budget, sleep=sleep)


def test_pages_walk_ids_downward_and_cover_their_ranges() -> None:
    fake, sleeps = FakeDiscourse(), list[float]()
    source = make_source(fake, sleeps)
    batches = list(source.read(None, batch_size=50))
    assert [(b.lo, b.hi, b.cursor) for b in batches] == [(6, 9, 6), (2, 5, 2), (1, 1, 1)]
    post = next(p for b in batches for p in b.posts if p.post_id == 1)
    assert (post.topic_title, post.tags, post.category_name) == ("Shadows", ("rendering",), "Support")
    assert source.restricted_categories() == frozenset({5})
    assert [p.post_id for b in source.read(6, batch_size=50) for p in b.posts] == [5, 4, 3, 2, 1]
    assert sum(r.startswith("/t/") for r in fake.requests) == 3  # one request per topic, cached


def test_429_is_retried_after_the_servers_wait() -> None:
    fake, sleeps = FakeDiscourse(), list[float]()
    fake.throttle_next = 1
    source = make_source(fake, sleeps)
    assert source.restricted_categories() == frozenset({5})
    # The server's wait (through the shared budget), then the bucket refills from empty to the floor.
    assert 3.0 <= sum(sleeps) < 3.5


def test_auth_failure_is_permanent() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"errors": ["You are not permitted"], "error_type": "invalid_access"})

    settings = DiscourseSettings(base_url="http://forum.test", api_key="k" * 20)  # type: ignore[call-arg,arg-type]
    source = ApiSource(httpx.Client(transport=httpx.MockTransport(handler)), settings, sleep=lambda s: None)
    with pytest.raises(AuthError):
        source.restricted_categories()


@pytest.mark.integration
def test_backfill_over_the_api_removes_what_the_forum_no_longer_lists(db_url: str) -> None:
    fake, sleeps = FakeDiscourse(), list[float]()
    embedder = FakeEmbedder(model="test-model")
    options = BackfillOptions(batch_size=2, progress=False)
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    first = run_backfill(database, make_source(fake, sleeps), embedder, options)
    assert (first.seen, first.embedded, first.reasons) == (9, 6, {"restricted": 3})
    del fake.posts[4]  # hidden or deleted: Discourse stops listing it
    fake.posts[2]["cooked"] = "<p>Edited</p>"
    fake.posts[2]["updated_at"] = "2024-02-01T00:00:00.000Z"
    second = run_backfill(database, make_source(fake, sleeps), embedder, options)
    assert (second.seen, second.embedded, second.skipped, second.removed) == (8, 1, 4, 1)
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT post_id FROM post_index ORDER BY post_id")]
    assert ids == [1, 2, 3, 5, 6]


@pytest.mark.integration
def test_limit_on_the_downward_walk_keeps_the_newest_posts_and_resumes_below(db_url: str) -> None:
    fake, sleeps = FakeDiscourse(), list[float]()
    embedder = FakeEmbedder(model="test-model")
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    options = BackfillOptions(batch_size=2, progress=False, limit=3)
    first = run_backfill(database, make_source(fake, sleeps), embedder, options)
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT post_id FROM post_index ORDER BY post_id")]
    assert (first.status, ids) == ("idle", [])  # 9, 8, 7: topic 3 is restricted
    rest = run_backfill(database, make_source(fake, sleeps), embedder, BackfillOptions(progress=False))
    assert (rest.resumed_from, rest.seen, rest.embedded) == (7, 6, 6)
