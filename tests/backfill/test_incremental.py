"""Incremental updates (webhook events) on real PostgreSQL, with the shipped in-memory ``FakeForum``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import psycopg
import pytest

from backfill.incremental import IndexDeps, refresh_post, refresh_topic, remove_post
from backfill.run import BackfillOptions, run_backfill
from backfill.sources import SourcePost
from backfill.sources.memory import MemorySource
from tests.backfill.conftest import TEST_MODEL
from worker.db.connect import connect
from worker.domain import ForumCategory, ForumPost, ForumTopic
from worker.errors import IndexMismatchError
from worker.settings import DatabaseSettings
from worker.testing.forum import FakeForum
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration


def forum_topic(tid: int, n: int, *, category_id: int = 10) -> ForumTopic:
    posts = tuple(
        ForumPost(id=tid * 100 + i, topic_id=tid, post_number=i, username="al", user_id=1,
                  cooked=f"<p>Post {i} of topic {tid}</p>", topic_slug=f"t{tid}", topic_title=f"Topic {tid}",
                  category_id=category_id, updated_at="2024-01-01T00:00:00+00:00")
        for i in range(1, n + 1)
    )  # fmt: skip
    return ForumTopic(
        id=tid, title=f"Topic {tid}", slug=f"t{tid}", category_id=category_id, tags=("x",), posts=posts
    )


def as_source_posts(topic: ForumTopic) -> list[SourcePost]:
    return [
        SourcePost(post_id=p.id, topic_id=topic.id, post_number=p.post_number, topic_slug=topic.slug,
                   topic_title=topic.title, category_id=topic.category_id, category_name="Support",
                   tags=topic.tags, cooked=p.cooked, username=p.username, updated_at=p.updated_at)
        for p in topic.posts
    ]  # fmt: skip


World = tuple[FakeForum, FakeEmbedder, IndexDeps]


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    topics = {1: forum_topic(1, 3), 2: forum_topic(2, 2)}
    embedder = FakeEmbedder(model=TEST_MODEL)
    posts = [p for t in topics.values() for p in as_source_posts(t)]
    run_backfill(DatabaseSettings(url=db_url), MemorySource(posts), embedder, BackfillOptions(progress=False))  # type: ignore[call-arg]
    embedder.calls.clear()
    forum = FakeForum()
    for topic in topics.values():
        forum.put_topic(topic)
    with connect(DatabaseSettings(url=db_url)) as conn:  # type: ignore[call-arg]
        yield forum, embedder, IndexDeps(forum, embedder, conn)


def rows(db_url: str) -> dict[int, str]:
    with psycopg.connect(db_url) as conn:
        return dict(conn.execute("SELECT post_id, text FROM post_index").fetchall())


def test_unchanged_post_costs_no_embedding(world: World, db_url: str) -> None:
    _forum, embedder, deps = world
    assert refresh_post(deps, 101, "post_edited") == "unchanged"
    assert embedder.calls == []


def test_edited_post_is_re_embedded(world: World, db_url: str) -> None:
    forum, embedder, deps = world
    forum.edit_post(102, cooked="<p>Now with the fix</p>", updated_at="2024-05-01T00:00:00+00:00")
    assert refresh_post(deps, 102, "post_edited") == "embedded"
    assert rows(db_url)[102] == "Topic 1\nCategory: Support\nTags: x\n\nNow with the fix"
    assert len(embedder.calls) == 1


def test_destroyed_hidden_and_vanished_posts_are_removed(world: World, db_url: str) -> None:
    forum, embedder, deps = world
    forum.edit_post(101, deleted=True)  # what Discourse does before it sends post_destroyed
    assert refresh_post(deps, 101, "post_destroyed") == "removed"
    forum.edit_post(102, hidden=True)
    assert refresh_post(deps, 102, "post_edited") == "removed"
    assert refresh_post(deps, 999, "post_recovered") == "absent"
    assert remove_post(deps, 103) is True
    assert sorted(rows(db_url)) == [201, 202]
    assert embedder.calls == []


def test_recovered_post_comes_back(world: World, db_url: str) -> None:
    _forum, _embedder, deps = world
    remove_post(deps, 201)
    assert refresh_post(deps, 201, "post_recovered") == "embedded"
    assert 201 in rows(db_url)


def test_new_topic_title_re_embeds_the_topics_posts(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.put_topic(dataclasses.replace(forum.get_topic(1), title="Renamed topic"))
    result = refresh_topic(deps, 1, "topic_edited")
    assert (result.embedded, result.unchanged, result.removed) == (3, 0, 0)
    assert all(rows(db_url)[pid].startswith("Renamed topic\n") for pid in (101, 102, 103))
    assert refresh_topic(deps, 2, "topic_edited").embedded == 0


def test_topic_moved_into_a_restricted_category_leaves_the_index(world: World, db_url: str) -> None:
    forum, _embedder, deps = world
    forum.categories[77] = ForumCategory(77, "Staff", True)  # the indexer looks it up: restricted
    forum.put_topic(dataclasses.replace(forum.get_topic(2), category_id=77))
    result = refresh_topic(deps, 2, "topic_edited")
    assert result.removed == 2
    assert sorted(rows(db_url)) == [101, 102, 103]
    forum.remove_topic(1)
    assert refresh_topic(deps, 1, "topic_destroyed").removed == 3


def test_another_model_is_refused(world: World, db_url: str) -> None:
    _forum, _embedder, deps = world
    other = dataclasses.replace(deps, embedder=FakeEmbedder(model="other"))
    with pytest.raises(IndexMismatchError):
        refresh_post(other, 101, "post_edited")


def test_an_open_question_enters_the_index_with_its_first_answer_and_leaves_with_it(
    world: World, db_url: str
) -> None:
    forum, _embedder, base = world
    deps = dataclasses.replace(base, excluded_authors=("citebot",))
    question = ForumPost(id=301, topic_id=3, post_number=1, username="bo", user_id=2,
                         cooked="<p>What is the best recipe for sourdough bread?</p>",
                         updated_at="2024-01-01T00:00:00+00:00")  # fmt: skip
    forum.put_topic(ForumTopic(id=3, title="Sourdough bread", slug="sourdough", category_id=10,
                               posts=(question,)))  # fmt: skip
    assert refresh_post(deps, 301, "post_created") == "absent"  # nobody answered: not evidence
    bot = ForumPost(id=302, topic_id=3, post_number=2, username="citebot", user_id=9,
                    cooked="<p>I don't know.</p>", reply_to_post_number=1)  # fmt: skip
    mention = '<p><a class="mention" href="/u/citebot">@citebot</a> any idea?</p>'
    asker = ForumPost(id=303, topic_id=3, post_number=3, username="cy", user_id=3,
                      raw="@citebot any idea?", cooked=mention)  # fmt: skip
    forum.put_topic(dataclasses.replace(forum.get_topic(3), posts=(question, bot, asker)))
    assert refresh_post(deps, 302, "post_created") == "absent"
    assert refresh_post(deps, 303, "post_created") == "absent"
    assert 301 not in rows(db_url)  # the bot's reply and a question to the bot answer nothing
    answer = ForumPost(id=304, topic_id=3, post_number=4, username="al", user_id=1,
                       cooked="<p>Feed the starter twice a day.</p>")  # fmt: skip
    forum.put_topic(dataclasses.replace(forum.get_topic(3), posts=(question, bot, asker, answer)))
    assert refresh_post(deps, 304, "post_created") == "embedded"
    assert {301, 304} <= set(rows(db_url))  # answered: the question is the context of its answer
    forum.edit_post(304, deleted=True)
    assert refresh_post(deps, 304, "post_destroyed") == "removed"
    assert not {301, 302, 303, 304} & set(rows(db_url))  # open again


def test_a_re_embedded_post_gets_its_excerpt_vector_too(world: World, db_url: str) -> None:
    from backfill.excerpts import fill_excerpts
    from worker.retrieval.excerpts import excerpt_of

    forum, _embedder, deps = world
    second = FakeEmbedder(model="second-model", dimension=4)
    fill_excerpts(DatabaseSettings(url=db_url), second)  # type: ignore[call-arg]
    forum.edit_post(102, cooked="<p>Now with the fix</p>", updated_at="2024-05-01T00:00:00+00:00")
    deps = dataclasses.replace(deps, excerpt_embedder=second)
    assert refresh_post(deps, 102, "post_edited") == "embedded"
    assert second.calls[-1].texts == (excerpt_of("Topic 1", rows(db_url)[102])[0],)
    with psycopg.connect(db_url) as conn:
        digest = conn.execute("SELECT digest FROM excerpt_vectors WHERE post_id = 102").fetchone()
    assert bytes(digest[0]) == excerpt_of("Topic 1", rows(db_url)[102])[1]


def test_a_failing_second_model_never_fails_the_refresh(world: World, db_url: str) -> None:
    forum, _embedder, deps = world

    class Broken(FakeEmbedder):
        def embed_array(self, texts):  # type: ignore[no-untyped-def]
            raise IndexMismatchError("wrong model", service="excerpt-embeddings")

    forum.edit_post(102, cooked="<p>Again</p>", updated_at="2024-05-02T00:00:00+00:00")
    deps = dataclasses.replace(deps, excerpt_embedder=Broken(model="second-model", dimension=4))
    assert refresh_post(deps, 102, "post_edited") == "embedded"
    assert rows(db_url)[102].endswith("Again")
