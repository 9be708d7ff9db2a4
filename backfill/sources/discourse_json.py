"""Discourse's post and topic JSON (``/t/{id}.json``, ``/posts.json``) → ``SourcePost``, in one place.

The ``api`` and ``file`` sources read the same shapes; only where the JSON comes from differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backfill.evidence import REPLY_WINDOW
from backfill.sources import SourcePost


def tag_names(tags: object) -> tuple[str, ...]:
    """Tags as plain names (Discourse sends strings, or ``{"name": …}`` objects since 3.2)."""
    if not isinstance(tags, list):
        return ()
    names = [t.get("name") if isinstance(t, dict) else t for t in tags]
    return tuple(str(n) for n in names if n)


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
    """One post of ``topic`` as the backfill sees it; the post's own topic fields win when present.

    ``replies``: for a first post, the topic's other posts (``stream_replies``), or None when unknown.
    """
    return SourcePost(
        post_id=int(p["id"]),
        topic_id=int(p.get("topic_id") or topic["id"]),
        post_number=int(p["post_number"]),
        topic_slug=str(p.get("topic_slug") or topic.get("slug") or ""),
        topic_title=str(p.get("topic_title") or topic.get("title") or ""),
        category_id=int(str(category_id)) if category_id is not None else None,
        category_name=category_name,
        tags=tag_names(topic.get("tags")),
        cooked=str(p.get("cooked") or ""),
        raw=raw,
        post_type=int(p.get("post_type") or 1),
        hidden=bool(p.get("hidden")),
        deleted=p.get("deleted_at") is not None,
        user_deleted=bool(p.get("user_deleted")),
        archetype=str(topic.get("archetype") or "regular"),
        topic_visible=bool(topic.get("visible", True)),
        topic_deleted=topic.get("deleted_at") is not None,
        category_read_restricted=restricted,
        username=p.get("username"),
        updated_at=p.get("updated_at"),
        reply_to_post_number=p.get("reply_to_post_number"),
        reply_to_username=_reply_to_username(p),
        accepted_answer=p.get("accepted_answer") is True,
        replies=replies,
    )


def _reply_to_username(p: Mapping[str, Any]) -> str | None:
    user = p.get("reply_to_user")
    name = user.get("username") if isinstance(user, Mapping) else None
    return str(name) if name else None


def stream_replies(topic: Mapping[str, Any], post_id: int) -> tuple[SourcePost, ...] | None:
    """The topic's other posts of its first stream page, as far as evidence needs them (author, type,
    state, addressing): what ``backfill.evidence`` reads to tell an open question from an answered one.
    None when the topic JSON has no post stream (cannot tell)."""
    stream = topic.get("post_stream")
    if not isinstance(stream, Mapping) or not isinstance(stream.get("posts"), list):
        return None
    posts = stream["posts"]
    out = []
    for p in posts[:REPLY_WINDOW]:
        if int(p["id"]) == post_id:
            continue
        out.append(
            SourcePost(
                post_id=int(p["id"]),
                topic_id=int(p.get("topic_id") or topic["id"]),
                post_number=int(p["post_number"]),
                topic_slug="",
                topic_title="",
                category_id=None,
                category_name=None,
                tags=(),
                cooked=str(p.get("cooked") or ""),
                raw=p.get("raw"),
                post_type=int(p.get("post_type") or 1),
                hidden=bool(p.get("hidden")),
                deleted=p.get("deleted_at") is not None,
                user_deleted=bool(p.get("user_deleted")),
                username=p.get("username"),
                reply_to_username=_reply_to_username(p),
            )
        )
    return tuple(out)
