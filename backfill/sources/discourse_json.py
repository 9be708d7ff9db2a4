"""The one builder of a ``SourcePost`` from Discourse's JSON, for every reader of the live forum's JSON.

The JSON is read once, by ``worker.domain.ForumPost.from_json`` and ``ForumTopic.from_json``: what a
post's fields mean (``deleted``: trashed or withdrawn by its author, pinned to Discourse's
``PostSerializer`` and ``PostDestroyer`` there) is decided in that one place. ``to_source_post`` turns
such a post and its topic into the backfill's shape. Its callers:

- the ``api`` and ``file`` sources, with the JSON they read (``source_post``, ``stream_replies``);
- the live indexer (``backfill.incremental``), with what the REST client returned.

So a post reads the same whichever path indexed it, and a refresh never rewrites a row only because
another path read it. The ``db`` source reads Discourse's tables, not its JSON; its SQL folds the same
two columns into ``deleted`` (``backfill.sources.db``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backfill.evidence import REPLY_WINDOW
from backfill.sources import SourcePost
from worker.domain import ForumPost, ForumTopic


def to_source_post(
    post: ForumPost,
    topic: ForumTopic,
    category_name: str | None,
    *,
    category_id: int | None = None,
    restricted: bool = False,
    raw: str | None = None,
    replies: tuple[SourcePost, ...] | None = None,
    read_replies: bool = True,
) -> SourcePost:
    """``post`` of ``topic`` as the backfill sees it. The topic's own fields win over the copies a post
    carries (``topic_slug``, ``topic_title``): the topic read is the authority on them, and a renamed
    topic re-embeds its posts.

    ``category_id`` defaults to the topic's and ``raw`` to the post's. A first post carries the topic's
    other posts that ``topic.posts`` holds (``read_replies``; the first page of the stream), so
    ``backfill.evidence`` can tell an open question; with none loaded it cannot tell (None), unless
    ``replies`` gives them.
    """
    if replies is None and read_replies and post.post_number == 1 and topic.posts:
        replies = _replies(topic, post.id)
    return SourcePost(
        post_id=post.id,
        topic_id=post.topic_id or topic.id,
        post_number=post.post_number,
        topic_slug=topic.slug or post.topic_slug,
        topic_title=topic.title or post.topic_title,
        category_id=topic.category_id if category_id is None else category_id,
        category_name=category_name,
        tags=topic.tags,
        cooked=post.cooked,
        raw=post.raw if raw is None else raw,
        post_type=post.post_type,
        hidden=post.hidden,
        deleted=post.deleted,
        archetype=topic.archetype,
        topic_visible=topic.visible,
        topic_deleted=topic.deleted,
        category_read_restricted=restricted,
        username=post.username or None,  # a post whose author was removed: no name, not ""
        updated_at=post.updated_at,
        reply_to_post_number=post.reply_to_post_number,
        reply_to_username=post.reply_to_username,
        accepted_answer=post.accepted_answer,
        replies=replies,
    )


def _replies(topic: ForumTopic, post_id: int) -> tuple[SourcePost, ...]:
    """The topic's other posts of its first stream page, as far as evidence reads them."""
    return tuple(
        to_source_post(p, topic, None, read_replies=False)
        for p in topic.posts[:REPLY_WINDOW]
        if p.id != post_id
    )


def source_post(
    p: Mapping[str, Any],
    topic: Mapping[str, Any],
    *,
    category_id: object,
    category_name: str | None,
    restricted: bool,
    raw: str | None,
    replies: tuple[SourcePost, ...] | None = None,
) -> SourcePost:
    """One post of ``topic``, both as Discourse's JSON (the ``api`` and ``file`` sources).

    ``replies``: for a first post, the topic's other posts (``stream_replies``), or None when unknown.
    """
    return to_source_post(
        ForumPost.from_json(p, topic=topic),
        ForumTopic.from_json(topic, posts=()),  # the stream's posts are read by stream_replies
        category_name,
        category_id=int(str(category_id)) if category_id is not None else None,
        restricted=restricted,
        raw=raw,
        replies=replies,
        read_replies=False,
    )


def stream_replies(topic: Mapping[str, Any], post_id: int) -> tuple[SourcePost, ...] | None:
    """The topic's other posts of its first stream page, as far as evidence needs them (author, type,
    state, addressing): what ``backfill.evidence`` reads to tell an open question from an answered one.
    None when the topic JSON has no post stream (cannot tell)."""
    stream = topic.get("post_stream")
    if not isinstance(stream, Mapping) or not isinstance(stream.get("posts"), list):
        return None
    first_page = {**topic, "post_stream": {"posts": stream["posts"][:REPLY_WINDOW]}}
    return _replies(ForumTopic.from_json(first_page), post_id)
