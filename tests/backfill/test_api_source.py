"""The ``api`` source against the Discourse double (``eval/stack/forum``) over loopback HTTP: the same
app the e2e tests, the soak and the forum contract suite talk to, seeded with three topics."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
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
from eval.stack.postgres import wait_for_checkpoint
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
    # The incremental walk sees neither (an old post's edit or deletion comes through the webhooks);
    # --full walks the whole forum again and does.
    assert run_backfill(database, make_source(double, sleeps), embedder, options).seen == 0
    full = dataclasses.replace(options, full=True)
    second = run_backfill(database, make_source(double, sleeps), embedder, full)
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


# -- the incremental walk (issue 33, finding 4) ------------------------------------------------------

ADMIN = {"Api-Key": KEY, "Api-Username": "system"}


def _new_posts(double: Double, topic_ids: list[int]) -> list[int]:
    """One new reply in each of ``topic_ids`` (as the admin); their post ids."""
    ids = []
    with httpx.Client(base_url=double.url, headers=ADMIN, timeout=10) as http:
        for n, topic_id in enumerate(topic_ids):
            raw = f"A new answer number {n} about topic {topic_id}: try the other setting."
            response = http.post("/posts.json", json={"topic_id": topic_id, "raw": raw})
            response.raise_for_status()
            ids.append(int(response.json()["id"]))
    return ids


def _index(db_url: str) -> tuple[int | None, str, list[int]]:
    """The vector index's oid and state, and the indexed post ids."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT c.oid, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid"
            " WHERE c.relname = 'post_index_embedding_hnsw'"
        ).fetchone()
        ids = [int(r[0]) for r in conn.execute("SELECT post_id FROM post_index ORDER BY post_id")]
    if row is None:
        return None, "missing", ids
    return int(row[0]), "valid" if row[1] else "invalid", ids


def _recall_by_index(db_url: str, embedder: FakeEmbedder, text: str) -> list[int]:
    """Nearest posts to ``text`` through the HNSW index (sequential scans off): recall works."""
    vector = "[" + ",".join(str(float(x)) for x in embedder.embed([text])[0]) + "]"
    with psycopg.connect(db_url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = " ".join(
            str(r[0])
            for r in conn.execute(
                "EXPLAIN SELECT post_id FROM post_index ORDER BY embedding <=> %s::halfvec LIMIT 3", (vector,)
            )
        )
        assert "post_index_embedding_hnsw" in plan
        rows = conn.execute(
            "SELECT post_id FROM post_index ORDER BY embedding <=> %s::halfvec LIMIT 3", (vector,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_an_incremental_run_reads_only_the_new_posts_and_keeps_the_index(double: Double, db_url: str) -> None:
    """Finding 4: over an indexed forum, the scheduled `--source api` run re-read every post through the
    60-a-minute API, dropped the vector index and rebuilt it. It reads the posts created since its last
    walk, embeds only them, and writes them into the live index."""
    embedder = FakeEmbedder(model="test-model")
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    options = BackfillOptions(batch_size=2, progress=False)
    first = run_backfill(database, make_source(double, []), embedder, options)
    assert (first.seen, first.embedded) == (9, 6)  # into an empty table: a bulk load
    oid, state, _ = _index(db_url)
    assert state == "valid"
    new = _new_posts(double, [1, 2, 2])
    texts_before, calls_before = embedder.texts_embedded, len(double.app.calls)

    second = run_backfill(database, make_source(double, []), embedder, options)

    calls = double.app.calls[calls_before:]
    assert (second.seen, second.embedded, second.skipped) == (3, 3, 0)
    assert embedder.texts_embedded - texts_before == 3  # nothing unchanged is embedded again
    # One page of /posts.json (4 a page here: 3 new posts and one already walked), one read per touched
    # topic, and the run's /site.json and /tag_groups.json: no post below the watermark is read.
    assert sorted(c.path for c in calls) == [
        "/posts.json", "/site.json", "/t/1.json", "/t/2.json", "/tag_groups.json",
    ]  # fmt: skip
    assert _index(db_url) == (oid, "valid", [101, 102, 103, 201, 202, 203, *new])
    with psycopg.connect(db_url) as conn:
        saved = conn.execute("SELECT cursor, status FROM backfill_state WHERE source = 'api'").fetchone()
    assert saved == ({"since": max(new)}, "done")
    third = run_backfill(database, make_source(double, []), embedder, options)
    assert (third.seen, third.embedded) == (0, 0)


KILLABLE = """
import sys
from backfill.run import BackfillOptions, run_backfill
from backfill.sources.api import ApiSource
import httpx
from worker.budget import ApiBudget
from worker.settings import DatabaseSettings, DiscourseSettings
from worker.testing.models import FakeEmbedder

url, db_url, key = sys.argv[1:4]
settings = DiscourseSettings(base_url=url, api_key=key, site_api_limit_per_minute=10_000,
                             api_requests_per_minute=6000, api_burst=100)
source = ApiSource(httpx.Client(timeout=10), settings, budget=ApiBudget(settings))
run_backfill(DatabaseSettings(url=db_url), source, FakeEmbedder(model="test-model"),
             BackfillOptions(batch_size=2, progress=False))
"""


def test_a_killed_incremental_run_leaves_the_index_valid_and_the_rerun_resumes(
    double: Double, db_url: str
) -> None:
    """kill -9 in the middle of an incremental walk: the vector index stays valid and recall uses it
    throughout; the next run resumes below the last committed page and embeds only what is left."""
    embedder = FakeEmbedder(model="test-model")
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    options = BackfillOptions(batch_size=2, progress=False)
    run_backfill(database, make_source(double, []), embedder, options)
    oid, _, _ = _index(db_url)
    new = _new_posts(double, [1, 2] * 6)  # 12 new posts: three pages of 4
    double.app.faults.update({"latency_s": 0.3})  # slow enough to stop between pages
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, double.url, db_url, KEY],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        saved = wait_for_checkpoint(db_url, "api", running=lambda: proc.poll() is None)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(10)
    assert "post_id" in saved, "the run ended before it could be stopped"
    double.app.faults.update({"latency_s": 0.0})
    killed_oid, state, ids = _index(db_url)
    written = sorted(set(ids) & set(new))
    assert (killed_oid, state) == (oid, "valid")
    assert 0 < len(written) < len(new)  # stopped in the middle
    assert _recall_by_index(db_url, embedder, "Shadows flicker on my terrain.")[0] == 101

    rerun = run_backfill(database, make_source(double, []), embedder, options)
    assert rerun.resumed_from is not None
    assert rerun.resumed_from <= min(written)
    assert rerun.embedded == len(new) - len(written)  # nothing written before is embedded again
    assert _index(db_url) == (oid, "valid", sorted({101, 102, 103, 201, 202, 203, *new}))
    with psycopg.connect(db_url) as conn:
        after = conn.execute("SELECT cursor, status FROM backfill_state WHERE source = 'api'").fetchone()
    assert after == ({"since": max(new)}, "done")


def test_the_first_api_run_after_a_file_load_reads_only_newer_posts_and_embeds_nothing_twice(
    double: Double, db_url: str, tmp_path: Path
) -> None:
    """Issue 33: over an index a file (or db) load filled, the first `--source api` run had no watermark,
    walked the whole forum through the API (the demo's ETA: hours) and embedded unchanged posts again,
    because the API's /site.json names the category the export did not. It starts after the newest
    indexed post, and a post's `Category:` line comes from the recorded categories whatever the source."""
    from backfill.sources.file import FileSource

    embedder = FakeEmbedder(model="test-model")
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    options = BackfillOptions(batch_size=2, progress=False)
    export = write_export(tmp_path / "file-export", TOPICS)  # no categories.json: no names
    loaded = run_backfill(database, FileSource(export), embedder, options)
    assert loaded.embedded == 9
    new = _new_posts(double, [1, 2])
    calls_before = len(double.app.calls)

    first_api = run_backfill(database, make_source(double, []), embedder, options)

    calls = double.app.calls[calls_before:]
    assert (first_api.seen, first_api.embedded) == (2, 2)
    assert sorted(c.path for c in calls) == [
        "/posts.json", "/site.json", "/t/1.json", "/t/2.json", "/tag_groups.json",
    ]  # fmt: skip
    assert _index(db_url)[2] == [101, 102, 103, 201, 202, 203, *new]  # topic 3: staff only, purged
    # The API recorded the names; a whole-forum walk (--full) embeds each old post once more, its text now
    # carrying the name, and the export read again afterwards gives the same text: nothing is embedded.
    full = run_backfill(database, make_source(double, []), embedder, dataclasses.replace(options, full=True))
    assert (full.embedded, full.skipped) == (6, 2)  # topics 1 and 2's old posts; topic 3 is staff only
    again = run_backfill(database, FileSource(export), embedder, options)
    assert again.embedded == 0
