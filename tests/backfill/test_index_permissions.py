"""The index follows the forum's permissions and visibility (issue 32), incremental path on real
PostgreSQL with the shipped ``FakeForum``: categories fail closed (looked up, restricted, forgotten, a
partial list that never widens), posts moved away followed, an author or place rewritten without an
embedding, staff-only tags left out."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import psycopg
import pytest

from backfill.incremental import IndexDeps, refresh_category, refresh_post, refresh_topic, sync_categories
from backfill.run import BackfillOptions, run_backfill
from backfill.sources import SourcePost
from backfill.sources.memory import MemorySource
from tests.backfill.conftest import TEST_MODEL, recorded_categories
from worker.db.connect import connect
from worker.domain import ForumCategory, ForumPost, ForumTopic, TagGroup
from worker.settings import DatabaseSettings
from worker.testing.forum import FakeForum
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration


def topic(
    tid: int, n: int, *, category_id: int = 10, title: str | None = None, **fields: object
) -> ForumTopic:
    title = title or f"Topic {tid}"
    posts = tuple(
        ForumPost(id=tid * 100 + i, topic_id=tid, post_number=i, username="al", user_id=1,
                  cooked=f"<p>Post {i} of topic {tid}</p>", topic_slug=f"t{tid}", topic_title=title,
                  category_id=category_id, updated_at="2024-01-01T00:00:00+00:00")
        for i in range(1, n + 1)
    )  # fmt: skip
    return ForumTopic(tid, title, f"t{tid}", category_id, tags=("x",), posts=posts, **fields)  # type: ignore[arg-type]


def source_posts(t: ForumTopic) -> list[SourcePost]:
    return [
        SourcePost(post_id=p.id, topic_id=t.id, post_number=p.post_number, topic_slug=t.slug,
                   topic_title=t.title, category_id=t.category_id, category_name="Support", tags=t.tags,
                   cooked=p.cooked, username=p.username, updated_at=p.updated_at)
        for p in t.posts
    ]  # fmt: skip


World = tuple[FakeForum, FakeEmbedder, IndexDeps]


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    topics = [topic(1, 3), topic(2, 2)]
    embedder = FakeEmbedder(model=TEST_MODEL)
    posts = [p for t in topics for p in source_posts(t)]
    run_backfill(DatabaseSettings(url=db_url), MemorySource(posts), embedder, BackfillOptions(progress=False))  # type: ignore[call-arg]
    embedder.calls.clear()
    forum = FakeForum()
    for t in topics:
        forum.put_topic(t)
    with connect(DatabaseSettings(url=db_url)) as conn:  # type: ignore[call-arg]
        yield forum, embedder, IndexDeps(forum, embedder, conn)


def rows(db_url: str) -> dict[int, tuple[int, str | None, str]]:
    """post id -> (topic id, username, text)."""
    with psycopg.connect(db_url) as conn:
        found = conn.execute("SELECT post_id, topic_id, username, text FROM post_index").fetchall()
    return {int(r[0]): (int(r[1]), r[2], r[3]) for r in found}


def citable(db_url: str) -> set[int]:
    with psycopg.connect(db_url) as conn:
        return {int(r[0]) for r in conn.execute("SELECT category_id FROM citable_categories")}


def test_a_category_never_described_is_looked_up_once(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.categories[20] = ForumCategory(20, "Created since", False)
    forum.put_topic(topic(3, 2, category_id=20))
    assert refresh_topic(deps, 3, "topic_edited").embedded == 2
    assert recorded_categories(db_url)[20] == ("Created since", False)
    assert 20 in citable(db_url)
    refresh_post(deps, 302, "post_edited")
    assert forum.calls.count("category 20") == 1  # recorded: no second look-up


def test_a_category_the_forum_will_not_show_is_restricted(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.put_topic(topic(3, 2, category_id=21))  # 404 on /c/21/show.json
    result = refresh_topic(deps, 3, "topic_edited")
    assert (result.embedded, result.removed) == (0, 0)
    assert not {301, 302} & set(rows(db_url))
    assert 21 not in recorded_categories(db_url)


def test_a_category_made_private_leaves_the_index_with_its_subcategories(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.categories[30] = ForumCategory(30, "Sub", False, parent_id=10)
    forum.put_topic(topic(3, 2, category_id=30))
    refresh_topic(deps, 3, "topic_edited")
    assert {101, 301} <= set(rows(db_url))
    forum.categories[10] = ForumCategory(10, "Support", True)  # category_updated: staff only now
    assert refresh_category(deps, 10, "category_updated") == "restricted"
    assert rows(db_url) == {}  # its posts and its subcategory's are gone at once
    assert citable(db_url) == set()
    forum.categories[10] = ForumCategory(10, "Support", False)
    assert refresh_category(deps, 10, "category_updated") == "public"
    assert citable(db_url) == {10, 30}  # cited again once the posts come back (next backfill or events)


def test_a_deleted_category_is_forgotten(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    del forum.categories[10]
    assert refresh_category(deps, 10, "category_destroyed") == "forgotten"
    assert 10 not in recorded_categories(db_url)
    assert rows(db_url) == {}


def test_a_partial_site_list_never_widens_what_is_public(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.categories[11] = ForumCategory(11, "Staff", True)
    refresh_category(deps, 11, "category_created")
    with psycopg.connect(db_url) as conn:  # a category the index holds posts of, never described
        conn.execute("UPDATE post_index SET category_id = 12 WHERE topic_id = 2")
    forum.categories[12] = ForumCategory(12, "Lazy", False)
    forum.site_lists = {10}  # lazy-loaded categories: /site.json lists the sidebar only
    line = sync_categories(deps)
    assert "1 listed, 1 looked up" in line
    assert recorded_categories(db_url)[11] == ("Staff", True)  # missing from the list: unchanged
    assert citable(db_url) == {10, 12}


def test_posts_moved_away_are_followed_to_their_new_topic(world: World, db_url: str) -> None:
    forum, embedder, deps = world
    # PostMover keeps the moved posts' ids: 102 into a new private message, 103 into a public topic
    # with the same title (so the same text: its row moves with no embedding).
    forum.put_topic(dataclasses.replace(topic(5, 0), archetype="private_message", category_id=None))
    forum.put_topic(topic(6, 1, title="Topic 1"))
    forum.edit_post(102, topic_id=5, post_number=2)
    forum.edit_post(103, topic_id=6, post_number=2)
    result = refresh_topic(deps, 1, "posts_moved")  # the split_topic notice's topic
    assert result.followed == 2
    indexed = rows(db_url)
    assert 102 not in indexed
    assert indexed[103][0] == 6
    assert 101 not in indexed  # the first post lost its answers: an open question again
    # Only topic 6's first post, now answered, was embedded: 103's row moved without a vector.
    assert [t for call in embedder.calls for t in call.texts] == [rows(db_url)[601][2]]


def test_a_topic_refresh_removes_its_ineligible_posts_wherever_recorded(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    # A post moved into a private message, whose row still names its old topic.
    forum.put_topic(dataclasses.replace(topic(5, 0), archetype="private_message", category_id=None))
    forum.edit_post(202, topic_id=5, post_number=1)
    assert refresh_topic(deps, 5, "topic_edited").removed == 1
    assert 202 not in rows(db_url)


def test_hidden_and_unlisted_leave_the_index(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.edit_post(102, hidden=True)  # Post#hide!: only reviewable events
    assert refresh_post(deps, 102, "reviewable") == "removed"
    forum.put_topic(dataclasses.replace(forum.get_topic(2), visible=False))  # topic_visible_status_updated
    assert refresh_topic(deps, 2, "topic_visible_status_updated").removed == 2
    assert sorted(rows(db_url)) == [101, 103]


def test_an_anonymized_author_is_rewritten_without_an_embedding(world: World, db_url: str) -> None:
    forum, embedder, deps = world
    forum.edit_post(102, username="anon81234")  # UserAnonymizer: same text, new name, no webhook
    assert refresh_post(deps, 102, "post_edited") == "rewritten"
    assert rows(db_url)[102][1] == "anon81234"
    assert refresh_post(deps, 102, "post_edited") == "unchanged"
    for pid in (101, 103):
        forum.edit_post(pid, username="anon81234")
    assert refresh_topic(deps, 1, "topic_edited").rewritten == 2
    assert {r[1] for r in rows(db_url).values() if r[0] == 1} == {"anon81234"}
    assert embedder.calls == []


def test_tags_only_staff_may_see_are_not_embedded(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.tag_groups = [TagGroup("Staff", ("x",), everyone=False), TagGroup("Open", ("y",), everyone=True)]
    forum.put_topic(dataclasses.replace(forum.get_topic(1), tags=("x", "y")))
    assert refresh_topic(deps, 1, "topic_edited").embedded == 3
    texts = [r[2] for pid, r in rows(db_url).items() if r[0] == 1]
    assert texts
    assert all("Tags: y\n" in t for t in texts)
    assert not any("x" in t.split("\n\n")[0].split("Tags:")[-1] for t in texts)
