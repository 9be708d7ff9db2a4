"""The ``api`` source against the Discourse double (``eval/stack/forum``) over loopback HTTP: the same
app the e2e tests, the soak and the forum contract suite talk to, seeded with three topics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from backfill.run import BackfillOptions, run_backfill
from backfill.sources.api import ApiSource
from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import Launcher
from tests.backfill.conftest import recorded_categories
from tests.eval.forum.export import write_export
from worker.budget import ApiBudget
from worker.errors import AuthError
from worker.settings import DatabaseSettings, DiscourseSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration

KEY = "k" * 20
# Post ids are topic id * 100 + post number: 101-103, 201-203, 301-303; category 5 is staff only.
TOPICS: list[dict[str, object]] = [
    {"id": 1, "title": "Shadows flicker", "category_id": 4, "tags": ["rendering"],
     "posts": [("alice", "Shadows flicker on my terrain."), ("bob", "Raise the depth bias."),
               ("alice", "That fixed it, thanks.")]},
    {"id": 2, "title": "Physics jitter", "category_id": 4, "tags": ["bullet"],
     "posts": [("carol", "Bodies jitter at rest."), ("dave", "Enable sleeping on the bodies."),
               ("carol", "Works now.")]},
    {"id": 3, "title": "Moderation notes", "category_id": 5,
     "posts": [("dave", "Staff only notes."), ("bob", "Noted by staff."), ("dave", "Closing this.")]},
]  # fmt: skip


@dataclass
class Double:
    app: ForumApp
    url: str
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self) -> httpx.Client:
        """An HTTP client closed with the double."""
        self.clients.append(httpx.Client(timeout=10))
        return self.clients[-1]

    def topic_requests(self) -> int:
        return sum(call.path.startswith("/t/") for call in self.app.calls)


@contextmanager
def serve(db_url: str, tmp_path: Path, **config: Any) -> Iterator[Double]:
    """The double over TOPICS; ``config``: more ``ForumConfig`` fields."""
    store = ForumStore(db_url)
    load_export(store, write_export(tmp_path / "export", TOPICS))
    with Launcher(tmp_path / "logs") as launcher:
        launcher.on_stop(store.close)
        forum = ForumConfig(
            api_key=KEY,
            categories={4: ("Support", False), 5: ("Staff", True)},
            latest_posts_page=4,
            admin_api_reqs_per_minute=10_000,
            **config,
        )
        app = create_forum_app(store, forum)
        launcher.on_stop(app.close)
        double = Double(app, launcher.thread(app.app, name="forum"))
        try:
            yield double
        finally:
            for client in double.clients:
                client.close()


@pytest.fixture
def double(db_url: str, tmp_path: Path) -> Iterator[Double]:
    with serve(db_url, tmp_path) as d:
        yield d


def _restricted(source: ApiSource) -> set[int]:
    listed = source.categories()
    assert listed is not None
    assert not listed.complete  # /site.json may be a partial list
    return {c.id for c in listed.categories if c.read_restricted}


def make_source(double: Double, sleeps: list[float], *, key: str = KEY) -> ApiSource:
    settings = DiscourseSettings(
        base_url=double.url,
        api_key=key,
        site_api_limit_per_minute=10_000,
        api_requests_per_minute=6000,
        api_burst=100,
    )  # type: ignore[call-arg,arg-type]
    now = [0.0]

    def sleep(seconds: float) -> None:  # a clock that moves only when the source sleeps
        sleeps.append(seconds)
        now[0] += seconds

    budget = ApiBudget(settings, sleep=sleep, clock=lambda: now[0])
    return ApiSource(double.client(), settings, budget=budget, sleep=sleep)


def test_pages_walk_ids_downward_and_cover_their_ranges(double: Double) -> None:
    sleeps: list[float] = []
    source = make_source(double, sleeps)
    batches = list(source.read(None, batch_size=50))
    # The last, empty page sweeps the ids below the lowest post down to 1 (nothing is left there).
    ranges = [(b.lo, b.hi, b.cursor) for b in batches]
    assert ranges == [(203, 303, 203), (102, 202, 102), (101, 101, 101), (1, 100, 1)]
    post = next(p for b in batches for p in b.posts if p.post_id == 101)
    assert (post.topic_title, post.tags, post.category_name) == ("Shadows flicker", ("rendering",), "Support")
    assert _restricted(source) == {5}
    assert [p.post_id for b in source.read(203, batch_size=50) for p in b.posts] == [202, 201, 103, 102, 101]
    assert double.topic_requests() == 3  # one request per topic, cached


def test_429_is_retried_after_the_servers_wait(double: Double) -> None:
    sleeps: list[float] = []
    double.app.faults.update({"rate_limit_next": 1, "retry_after_s": 3})
    source = make_source(double, sleeps)
    assert _restricted(source) == {5}
    # The server's wait (through the shared budget), then the bucket refills from empty to the floor.
    assert 3.0 <= sum(sleeps) < 3.5


def test_auth_failure_is_permanent(double: Double) -> None:
    source = make_source(double, [], key="not-the-key-" + "x" * 10)
    with pytest.raises(AuthError):
        source.categories()


def test_backfill_over_the_api_removes_what_the_forum_no_longer_lists(double: Double, db_url: str) -> None:
    sleeps: list[float] = []
    embedder = FakeEmbedder(model="test-model")
    options = BackfillOptions(batch_size=2, progress=False)
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    first = run_backfill(database, make_source(double, sleeps), embedder, options)
    assert (first.seen, first.embedded, first.reasons) == (9, 6, {"restricted": 3})
    admin = {"Api-Key": KEY, "Api-Username": "system"}
    with httpx.Client(base_url=double.url, headers=admin, timeout=10) as http:
        http.delete("/posts/202.json").raise_for_status()  # deleted: Discourse stops listing it
        http.put(
            "/posts/102.json", json={"post": {"raw": "Raise the depth bias and the slope bias."}}
        ).raise_for_status()
    second = run_backfill(database, make_source(double, sleeps), embedder, options)
    assert (second.seen, second.embedded, second.skipped, second.removed) == (8, 1, 4, 1)
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT post_id FROM post_index ORDER BY post_id")]
    assert ids == [101, 102, 103, 201, 203]


def test_limit_on_the_downward_walk_keeps_the_newest_posts_and_resumes_below(
    double: Double, db_url: str
) -> None:
    sleeps: list[float] = []
    embedder = FakeEmbedder(model="test-model")
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    options = BackfillOptions(batch_size=2, progress=False, limit=3)
    first = run_backfill(database, make_source(double, sleeps), embedder, options)
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT post_id FROM post_index ORDER BY post_id")]
    assert (first.status, ids) == ("idle", [])  # 303, 302, 301: topic 3 is restricted
    rest = run_backfill(database, make_source(double, sleeps), embedder, BackfillOptions(progress=False))
    assert (rest.resumed_from, rest.seen, rest.embedded) == (301, 6, 6)


def test_categories_a_lazy_site_list_lacks_are_looked_up_and_staff_tags_dropped(
    db_url: str, tmp_path: Path
) -> None:
    """/site.json lists only the sidebar (none here): the source asks /c/{id}/show.json for categories 4
    and 5 (public, restricted), and /tag_groups.json hides the staff-only tag (the API user is admin)."""
    config = {"lazy_load_categories": True, "sidebar_category_ids": (), "staff_only_tags": ("bullet",)}
    with serve(db_url, tmp_path, **config) as double:
        summary = run_backfill(
            DatabaseSettings(url=db_url),  # type: ignore[call-arg]
            make_source(double, []),
            FakeEmbedder(model="test-model"),
            BackfillOptions(batch_size=2, progress=False),
        )
        shows = sorted(c.path for c in double.app.calls if c.path.startswith("/c/"))
    assert shows == ["/c/4/show.json", "/c/5/show.json"]  # each once
    assert summary.reasons == {"restricted": 3}
    assert recorded_categories(db_url) == {4: ("Support", False), 5: ("Staff", True)}
    with psycopg.connect(db_url) as conn:
        tags = dict(conn.execute("SELECT post_id, tags FROM post_index").fetchall())
    assert tags[201] == []  # topic 2's "bullet" is staff only
    assert tags[101] == ["rendering"]
