"""One reading of Discourse's post JSON: the bulk sources (``api``, ``file``) and the live indexer (a
webhook's refresh through the REST client) build the same ``SourcePost`` from the same JSON.

Discourse's facts (``PostSerializer`` serializes ``post_type``, ``hidden``, ``deleted_at`` and
``user_deleted`` on every post; ``PostDestroyer``):
- a post staff deleted, or the stub of a withdrawn post once ``delete_removed_posts_after`` has run, is
  trashed: ``deleted_at`` is set;
- a post its author deleted is *withdrawn* (``PostDestroyer#mark_for_deletion``): ``deleted_at`` stays
  null, ``user_deleted`` becomes true and its raw is replaced by "(post deleted by author)"; it stays in
  the topic for everyone to see until the stub is trashed, and its author may recover it;
- a whisper is ``post_type`` 4, a moderator action 2, a small action 3;
- a post whose author account was removed has no ``username``.
"""

from __future__ import annotations

from typing import Any

import pytest

from backfill.evidence import ineligibility
from backfill.incremental import to_source_post
from backfill.sources.discourse_json import source_post, stream_replies
from worker.domain import ForumPost, ForumTopic

WITHDRAWN_COOKED = "<p>(post deleted by author)</p>"


def _topic() -> dict[str, Any]:
    return {
        "id": 7,
        "title": "Shadow resolution",
        "slug": "shadow-resolution",
        "category_id": 3,
        "archetype": "regular",
        "visible": True,
        "deleted_at": None,
        "tags": ["rendering"],
        "post_stream": {
            "posts": [
                _post(70, 1, "alice", "<p>How do I get sharper shadows?</p>"),
                _post(71, 2, "bob", "<p>Raise the shadow map size.</p>"),
            ]
        },
    }


def _post(post_id: int, number: int, username: str | None, cooked: str) -> dict[str, Any]:
    return {
        "id": post_id,
        "topic_id": 7,
        "post_number": number,
        "username": username,
        "user_id": post_id,
        "cooked": cooked,
        "post_type": 1,
        "reply_to_post_number": None,
        "topic_slug": "shadow-resolution",
        "hidden": False,
        "deleted_at": None,
        "user_deleted": False,
        "updated_at": "2024-05-01T10:00:00.000Z",
        "version": 1,
    }


CASES: dict[str, dict[str, Any]] = {
    "a plain answer": {},
    "withdrawn by its author": {"user_deleted": True, "cooked": WITHDRAWN_COOKED, "version": 2},
    "trashed by staff": {"deleted_at": "2024-05-02T08:00:00.000Z"},
    "hidden by flags": {"hidden": True},
    "a whisper": {"post_type": 4},
    "an author since removed": {"username": None, "user_id": None},
}


def _both(change: dict[str, Any], number: int) -> tuple[Any, Any]:
    data = _topic()
    post = data["post_stream"]["posts"][number - 1]
    post.update(change)
    first = number == 1
    bulk = source_post(
        post,
        data,
        category_id=data["category_id"],
        category_name=None,
        restricted=False,
        raw=None,
        replies=stream_replies(data, int(post["id"])) if first else None,
    )
    topic = ForumTopic(
        id=7,
        title=data["title"],
        slug=data["slug"],
        category_id=3,
        tags=("rendering",),
        posts=tuple(ForumPost.from_json(p, topic=data) for p in data["post_stream"]["posts"]),
    )
    live = to_source_post(ForumPost.from_json(post, topic=data), topic, None)
    return bulk, live


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("number", [1, 2], ids=["first post", "reply"])
def test_the_bulk_sources_and_the_live_indexer_build_the_same_post(case: str, number: int) -> None:
    bulk, live = _both(CASES[case], number)
    assert bulk == live


def test_a_post_withdrawn_by_its_author_is_deleted_whoever_reads_it() -> None:
    """The case the two readers disagreed on: ``deleted`` was ``deleted_at`` alone for the bulk
    sources and ``deleted_at`` or ``user_deleted`` for the live indexer."""
    bulk, live = _both(CASES["withdrawn by its author"], 2)
    assert bulk.deleted
    assert live.deleted
    assert ineligibility(bulk) == ineligibility(live) == "deleted"
    assert ForumPost.from_json({**_post(71, 2, "bob", WITHDRAWN_COOKED), "user_deleted": True}).deleted


def test_a_post_without_an_author_has_no_username_either_way() -> None:
    """Not an empty name: ``post_index.username`` is compared on each refresh (``backfill.rows``), and
    two posts without an author are not by the same person."""
    bulk, live = _both(CASES["an author since removed"], 2)
    assert bulk.username is None
    assert live.username is None


def test_an_open_question_reads_its_replies_the_same_way() -> None:
    """A first post whose only reply was withdrawn is an open question for both readers."""
    data_change = {"user_deleted": True, "cooked": WITHDRAWN_COOKED}
    data = _topic()
    data["post_stream"]["posts"][1].update(data_change)
    first = data["post_stream"]["posts"][0]
    bulk = source_post(
        first, data, category_id=3, category_name=None, restricted=False, raw=None,
        replies=stream_replies(data, 70),
    )  # fmt: skip
    topic = ForumTopic(
        7, data["title"], data["slug"], 3,
        posts=tuple(ForumPost.from_json(p, topic=data) for p in data["post_stream"]["posts"]),
    )  # fmt: skip
    live = to_source_post(ForumPost.from_json(first, topic=data), topic, None)
    assert ineligibility(bulk) == ineligibility(live) == "open_question"
