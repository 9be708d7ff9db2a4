"""The ``Forum`` contract: the in-memory ``FakeForum`` and the real ``DiscourseClient`` talking to the
Discourse double (``eval/stack/forum``) over loopback HTTP, seeded with the same topics, behave alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from eval.stack.forum.app import ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import Launcher
from tests.eval.forum.export import TOPICS, write_export
from worker.clients.discourse import DiscourseClient
from worker.domain import ForumPost
from worker.errors import NotFoundError
from worker.protocols import Forum
from worker.settings import DiscourseSettings
from worker.testing.forum import FakeForum

KEY = "contract-forum-key"
BOT = "citebot"
USER_IDS = {"alice": 2, "bob": 3, "carol": 4, "dave": 5}  # as tests/eval/forum/export.py writes them


def _fake() -> FakeForum:
    forum = FakeForum(bot=BOT)
    for topic in TOPICS:
        tid = int(topic["id"])  # type: ignore[call-overload]
        title = str(topic["title"])
        forum.add_topic(tid, title, title.lower().replace(" ", "-"), int(topic["category_id"]))  # type: ignore[call-overload]
        posts: list[tuple[str, str]] = topic["posts"]  # type: ignore[assignment]
        for n, (username, text) in enumerate(posts, start=1):
            forum.add_post(tid * 100 + n, tid, n, text, username=username, user_id=USER_IDS[username])
    forum.settings["citebot_enabled"] = True
    return forum


@pytest.fixture(params=["fake", pytest.param("discourse-client", marks=pytest.mark.integration)])
def forum(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Forum]:
    if request.param == "fake":
        yield _fake()
        return
    db_url: str = request.getfixturevalue("db_url")
    store = ForumStore(db_url)
    load_export(store, write_export(tmp_path / "export"))
    with Launcher(tmp_path / "logs") as launcher, httpx.Client(timeout=10) as http:
        launcher.on_stop(store.close)
        app = create_forum_app(
            store, ForumConfig(api_key=KEY, bot_username=BOT, admins=("system", BOT), min_post_length=10)
        )
        launcher.on_stop(app.close)
        url = launcher.thread(app.app, name="forum")
        app.config.base_url = url
        settings = DiscourseSettings(base_url=url, api_key=KEY, api_username=BOT)  # type: ignore[call-arg]
        client = DiscourseClient(http, settings)
        client.set_site_setting("citebot_enabled", True)
        yield client


def test_a_post_is_read_by_its_id(forum: Forum) -> None:
    post = forum.get_post(1002)
    assert (post.id, post.topic_id, post.post_number, post.username) == (1002, 10, 2, "bob")
    assert "precision qualifier" in (post.raw or "")
    assert "precision qualifier" in post.cooked
    assert post.topic_title == "Shader compile error on Android"


def test_a_missing_post_is_not_found(forum: Forum) -> None:
    with pytest.raises(NotFoundError):
        forum.get_post(999_999)


def test_a_topic_lists_its_posts_in_order(forum: Forum) -> None:
    topic = forum.get_topic(11, all_posts=True)
    assert topic.title == "Simple FPS counter"
    assert [(p.id, p.post_number) for p in topic.posts] == [(1101, 1), (1102, 2), (1103, 3)]


def test_a_topics_stream_has_cooked_posts_and_a_post_by_number_has_its_raw(forum: Forum) -> None:
    # TopicView serializes its posts without raw (PostStreamSerializerMixin adds it only with
    # include_raw); /posts/by_number/{topic}/{n}.json is PostsController#by_number, with raw.
    posts = forum.get_topic(10).posts
    assert [p.raw for p in posts] == [None, None]
    assert "precision qualifier" in posts[1].cooked
    assert "precision qualifier" in (forum.get_post_by_number(10, 2).raw or "")


def test_a_missing_topic_is_not_found(forum: Forum) -> None:
    with pytest.raises(NotFoundError):
        forum.get_topic(99_999)


def test_search_ands_its_terms_and_finds_one_post_per_topic(forum: Forum) -> None:
    hits = forum.search("precision shader")
    assert {h.topic_id for h in hits} == {10}
    assert len(hits) == len({h.topic_id for h in hits})
    assert forum.search("precision counter") == []  # no post holds both words


def test_a_created_post_is_the_topics_next_and_can_be_read_back(forum: Forum) -> None:
    created = forum.create_post(12, "Try a smaller physics time step for the bodies.", reply_to_post_number=1)
    assert isinstance(created, ForumPost)
    assert (created.topic_id, created.post_number, created.username) == (12, 2, BOT)
    assert created.reply_to_post_number == 1
    again = forum.get_post(created.id)
    assert "smaller physics time step" in (again.raw or "")
    assert [p.id for p in forum.get_topic(12, all_posts=True).posts] == [1201, created.id]


def test_site_settings_answer_the_names_asked_that_exist(forum: Forum) -> None:
    assert forum.get_site_settings(["citebot_enabled", "citebot_no_such_flag"]) == {"citebot_enabled": True}


# -- what the summon policy reads (worker/summon.py): the bot's view of a topic, an author's account ----


def test_an_open_topic_is_one_the_bot_may_reply_in(forum: Forum) -> None:
    topic = forum.get_topic(12)
    assert (topic.closed, topic.archived, topic.can_reply, topic.private_message) == (
        False,
        False,
        True,
        False,
    )
    assert (topic.allowed_users, topic.allowed_groups) == ((), ())


def test_a_posts_author_is_read_with_trust_level_groups_and_no_penalty(forum: Forum) -> None:
    post = forum.get_post(1002)
    member = forum.get_user(post.user_id)
    assert (member.id, member.username, member.trust_level) == (post.user_id, "bob", 1)
    assert (member.silenced, member.suspended, member.staged, member.staff) == (False, False, False, False)
    assert {"trust_level_0", "trust_level_1", "10", "11"} <= member.groups
    assert "trust_level_2" not in member.groups
    assert member.complete


def test_a_missing_account_is_not_found(forum: Forum) -> None:
    with pytest.raises(NotFoundError):
        forum.get_user(999_999)
    with pytest.raises(NotFoundError):
        forum.get_user_by_username("nobody-here")


def test_the_public_profile_is_an_incomplete_member(forum: Forum) -> None:
    member = forum.get_user_by_username("bob")
    assert (member.username, member.trust_level, member.complete) == ("bob", 1, False)
