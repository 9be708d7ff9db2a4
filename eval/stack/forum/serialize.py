"""Discourse's JSON shapes for posts, topics, notifications, settings and errors."""

from __future__ import annotations

import re
from typing import Any

from starlette.responses import JSONResponse

from eval.stack.forum.store import Row, as_iso

CHUNK_SIZE = 20  # Discourse's post stream page
# A quote of another post as the composer writes it: [quote="name, post:3, topic:42"]
_QUOTE = re.compile(r'\[quote="[^"\]]*?\bpost:(\d+),\s*topic:(\d+)', re.IGNORECASE)


def avatar(username: str) -> str:
    return f"/letter_avatar_proxy/v4/letter/{(username[:1] or 'x').lower()}/8e7dd6/{{size}}.png"


def error(status: int, message: str, error_type: str, **extra: Any) -> JSONResponse:
    """Discourse's error body: ``{"errors": [...], "error_type": ...}``."""
    body: dict[str, Any] = {"errors": [message], "error_type": error_type}
    body.update(extra)
    return JSONResponse(body, status_code=status)


def not_found() -> JSONResponse:
    return error(404, "The requested URL or resource could not be found.", "not_found")


def invalid_access() -> JSONResponse:
    return error(
        403,
        "You are not permitted to view the requested resource. The API username or key is invalid.",
        "invalid_access",
    )


def reply_quoted(row: Row) -> bool:
    """``Post#reply_quoted``: the post quotes the post it replies to (``QuotedPost.extract_from``)."""
    number = row.get("reply_to_post_number")
    if number is None:
        return False
    return any(
        int(post) == int(number) and int(topic) == int(row["topic_id"])
        for post, topic in _QUOTE.findall(row.get("raw") or "")
    )


def post_json(
    row: Row, *, with_raw: bool = True, viewer_id: int | None = None, suppress_quoting: bool = True
) -> dict[str, Any]:
    """A post as ``/posts/{id}.json`` and a topic's post stream serve it.

    ``reply_to_user`` is left out, as ``PostSerializer#include_reply_to_user?`` does, when the site has
    ``suppress_reply_when_quoting`` (Discourse's default) and the post quotes the post it replies to.
    """
    data: dict[str, Any] = {
        "id": row["id"],
        "name": "",
        "username": row["username"],
        "avatar_template": avatar(row["username"]),
        "created_at": as_iso(row["created_at"]),
        "cooked": row["cooked"],
        "post_number": row["post_number"],
        "post_type": row["post_type"],
        "updated_at": as_iso(row["updated_at"]),
        "reply_count": 0,
        "reply_to_post_number": row["reply_to_post_number"],
        "quote_count": 0,
        "incoming_link_count": 0,
        "reads": 1,
        "score": 0,
        "yours": viewer_id is not None and viewer_id == row["user_id"],
        "topic_id": row["topic_id"],
        "topic_slug": row["topic_slug"],
        "topic_title": row["topic_title"],
        "display_username": row["username"],
        "version": row["version"],
        "user_id": row["user_id"],
        "hidden": row["hidden"],
        "deleted_at": as_iso(row["deleted_at"]),
        "user_deleted": row["user_deleted"],
        "wiki": False,
        "accepted_answer": row["accepted_answer"],
    }
    if row.get("reply_to_username") and not (suppress_quoting and reply_quoted(row)):
        data["reply_to_user"] = {
            "username": row["reply_to_username"],
            "avatar_template": avatar(row["reply_to_username"]),
        }
    if with_raw:
        data["raw"] = row["raw"]
    return data


def webhook_post_json(row: Row, topic_posts_count: int, *, suppress_quoting: bool = True) -> dict[str, Any]:
    """WebHookPostSerializer: the post plus topic fields, ``raw``, and no tags."""
    data = post_json(row, with_raw=True, suppress_quoting=suppress_quoting)
    data.update(
        {
            "category_id": row["category_id"],
            "category_slug": f"category-{row['category_id']}" if row["category_id"] is not None else None,
            "topic_archetype": row["topic_archetype"],
            "topic_posts_count": topic_posts_count,
            "topic_filtered_posts_count": topic_posts_count,
        }
    )
    data.pop("yours", None)
    return data


def topic_json(
    topic: Row, posts: list[Row], *, viewer_id: int | None, suppress_quoting: bool = True
) -> dict[str, Any]:
    """``/t/{id}.json``: the first chunk of the post stream and every post id in ``stream``."""
    return {
        "post_stream": {
            "posts": [
                post_json(p, with_raw=False, viewer_id=viewer_id, suppress_quoting=suppress_quoting)
                for p in posts[:CHUNK_SIZE]
            ],
            "stream": [p["id"] for p in posts],
        },
        **webhook_topic_json(topic),
        "chunk_size": CHUNK_SIZE,
        "details": {"can_edit": False, "notification_level": 1, "participants": []},
    }


def webhook_topic_json(topic: Row) -> dict[str, Any]:
    """WebHookTopicViewSerializer: the topic's own fields, without the post stream (topic events)."""
    return {
        "id": topic["id"],
        "title": topic["title"],
        "fancy_title": topic["title"],
        "posts_count": topic["posts_count"],
        "created_at": as_iso(topic["created_at"]),
        "visible": topic["visible"],
        "closed": topic["closed"],
        "archived": topic["archived"],
        "archetype": topic["archetype"],
        "slug": topic["slug"],
        "category_id": topic["category_id"],
        "tags": list(topic["tags"] or []),
        "deleted_at": as_iso(topic["deleted_at"]),
        "user_id": topic["user_id"],
        "highest_post_number": topic["highest_post_number"] or 0,
    }


def pending_post_json(pending_id: int, raw: str, cooked: str, created_at: str, pending_count: int) -> Any:
    """``POST /posts.json`` when the post is held for review: ``NewPostResultSerializer`` with
    ``action: enqueued`` and a ``pending_post`` (``TopicPendingPostSerializer``), no ``post``, status 200."""
    return {
        "action": "enqueued",
        "pending_post": {"id": pending_id, "raw": raw, "cooked": cooked, "created_at": created_at},
        "pending_count": pending_count,
        "success": True,
    }


def notification_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "user_id": row["user_id"],
        "notification_type": row["notification_type"],
        "read": row["read"],
        "high_priority": row["notification_type"] == 6,
        "created_at": as_iso(row["created_at"]),
        "post_number": row["post_number"],
        "topic_id": row["topic_id"],
        "fancy_title": row["data"].get("topic_title"),
        "slug": row["slug"],
        "data": row["data"],
    }


def site_setting_json(row: Row) -> dict[str, Any]:
    return {
        "setting": row["name"],
        "description": row["description"],
        "default": row["default_value"],
        "type": row["type"],
        "value": row["value"],
        "category": row["category"],
        "preview": None,
        "secret": False,
        "placeholder": None,
        "mandatory_values": None,
        "requires_confirmation": None,
        **({"plugin": row["plugin"]} if row["plugin"] else {}),
    }
