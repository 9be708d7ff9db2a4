"""Discourse's JSON shapes for posts, topics, notifications, settings and errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from starlette.responses import JSONResponse

from eval.stack.forum.guardian import AUTO_GROUPS, Category, Guardian, User
from eval.stack.forum.store import Row, as_iso

CHUNK_SIZE = 20  # Discourse's post stream page
LIKE_ACTION_ID = 2  # PostActionType.types[:like]
# I18n flagging.user_must_edit / flagging.you_must_edit: what BasicPostSerializer#cooked shows instead of a
# hidden post (the wording is close to server.en.yml, not checked letter for letter).
HIDDEN_COOKED = "<p>This post was flagged by the community and is temporarily hidden.</p>"
HIDDEN_COOKED_AUTHOR = "<p>Your post was flagged by the community. Please see your messages.</p>"
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


def forbidden(message: str = "You are not permitted to view the requested resource.") -> JSONResponse:
    """``Discourse::InvalidAccess`` raised by a Guardian check (``ensure_can_…!``): 403 invalid_access."""
    return error(403, message, "invalid_access")


def not_logged_in() -> JSONResponse:
    """``Discourse::NotLoggedIn``: 403 not_logged_in."""
    return error(403, "You need to be logged in to do that.", "not_logged_in")


def success(**extra: Any) -> JSONResponse:
    """``success_json`` (``{"success": "OK"}``) with extra keys."""
    return JSONResponse({"success": "OK", **extra})


def reply_quoted(row: Row) -> bool:
    """``Post#reply_quoted``: the post quotes the post it replies to (``QuotedPost.extract_from``)."""
    number = row.get("reply_to_post_number")
    if number is None:
        return False
    return any(
        int(post) == int(number) and int(topic) == int(row["topic_id"])
        for post, topic in _QUOTE.findall(row.get("raw") or "")
    )


def actions_summary(row: Row) -> list[dict[str, int]]:
    """PostSerializer#actions_summary, likes only: ``{"id": 2, "count": n}`` when the post has likes
    (a zero count is deleted and an entry without ``count`` or ``can_act`` is left out). The double
    records no other post actions and nobody acts through it, so ``can_act`` and the flag entries that
    carry only it are not served."""
    count = int(row.get("like_count") or 0)
    return [{"id": LIKE_ACTION_ID, "count": count}] if count > 0 else []


def post_json(
    row: Row,
    *,
    with_raw: bool = True,
    viewer_id: int | None = None,
    suppress_quoting: bool = True,
    guardian: Guardian | None = None,
) -> dict[str, Any]:
    """A post as ``/posts/{id}.json`` and a topic's post stream serve it to ``guardian``'s user (None:
    the system user, as webhooks serialize).

    ``reply_to_user`` is left out, as ``PostSerializer#include_reply_to_user?`` does, when the site has
    ``suppress_reply_when_quoting`` (Discourse's default) and the post quotes the post it replies to. A
    hidden post's ``cooked`` is withheld from non-staff (``BasicPostSerializer#cooked_hidden``) and its
    ``raw`` from all but staff and its author (``PostSerializer#include_raw?``).
    """
    if guardian is not None and guardian.user is not None:
        viewer_id = guardian.user.id
    cooked = row["cooked"]
    hidden_cooked = guardian is not None and guardian.cooked_hidden(row)
    if hidden_cooked:
        cooked = HIDDEN_COOKED_AUTHOR if viewer_id == row["user_id"] else HIDDEN_COOKED
    data: dict[str, Any] = {
        "id": row["id"],
        "name": "",
        "username": row["username"],
        "avatar_template": avatar(row["username"]),
        "created_at": as_iso(row["created_at"]),
        "cooked": cooked,
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
        "actions_summary": actions_summary(row),
        "moderator": bool(row.get("user_moderator")),
        "admin": bool(row.get("user_admin")),
        "staff": bool(row.get("user_admin")) or bool(row.get("user_moderator")),
        "trust_level": row.get("user_trust_level"),
    }
    if hidden_cooked:
        data["cooked_hidden"] = True
    if row["hidden"]:
        data["hidden_reason_id"] = row.get("hidden_reason_id")
    if row.get("action_code"):
        data["action_code"] = row["action_code"]
    suspended_till = row.get("user_suspended_till")
    if suspended_till is not None and suspended_till > datetime.now(UTC):
        data["user_suspended"] = True
    if row.get("reply_to_username") and not (suppress_quoting and reply_quoted(row)):
        data["reply_to_user"] = {
            "username": row["reply_to_username"],
            "avatar_template": avatar(row["reply_to_username"]),
        }
    if with_raw and (guardian is None or guardian.include_raw(row)):
        data["raw"] = row["raw"]
    return data


def webhook_post_json(row: Row, topic_posts_count: int, *, suppress_quoting: bool = True) -> dict[str, Any]:
    """WebHookPostSerializer: the post plus topic fields, ``raw``, and no tags."""
    data = post_json(row, with_raw=True, suppress_quoting=suppress_quoting)
    data.update(
        {
            "category_id": row["category_id"],
            "category_slug": row.get("category_slug")
            or (f"category-{row['category_id']}" if row["category_id"] is not None else None),
            "topic_archetype": row["topic_archetype"],
            "topic_posts_count": topic_posts_count,
            "topic_filtered_posts_count": topic_posts_count,
        }
    )
    data.pop("yours", None)
    return data


def topic_json(
    topic: Row,
    posts: list[Row],
    *,
    guardian: Guardian,
    suppress_quoting: bool = True,
    allowed_users: Sequence[Row] = (),
) -> dict[str, Any]:
    """``/t/{id}.json`` (``TopicViewSerializer``) for ``guardian``'s user: the first chunk of the post
    stream and every post id in ``stream`` (the posts already filtered by ``TopicView``), the tags the
    user may see, ``details.can_create_post`` only when the user may reply
    (TopicViewDetailsSerializer#include_can_create_post? → ``Guardian#can_create?(Post, topic)``), and for a
    PM ``details.allowed_users``."""
    details: dict[str, Any] = {"can_edit": False, "notification_level": 1, "participants": []}
    if guardian.can_create_post_on_topic(topic):
        details["can_create_post"] = True
    if topic["archetype"] == "private_message":
        details["allowed_users"] = [
            {"id": u["id"], "username": u["username"], "avatar_template": avatar(u["username"])}
            for u in allowed_users
        ]
        details["allowed_groups"] = []
    data = {
        "post_stream": {
            "posts": [
                post_json(p, with_raw=False, guardian=guardian, suppress_quoting=suppress_quoting)
                for p in posts[:CHUNK_SIZE]
            ],
            "stream": [p["id"] for p in posts],
        },
        **webhook_topic_json(topic),
        "chunk_size": CHUNK_SIZE,
        "details": details,
    }
    data["tags"] = guardian.visible_tags(data["tags"])
    return data


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


def category_json(
    category: Category, *, topic_count: int = 0, post_count: int = 0, editable: bool = False
) -> dict[str, Any]:
    """A category as ``BasicCategorySerializer`` / ``CategorySerializer`` show it; ``group_permissions``
    only to a user who can edit it (``include_group_permissions?``). ``WebHookCategorySerializer`` is the
    same to the system user, without ``can_edit``/``notification_level``/``available_groups``."""
    data: dict[str, Any] = {
        "id": category.id,
        "name": category.name,
        "color": category.color,
        "text_color": category.text_color,
        "slug": category.slug,
        "topic_count": topic_count,
        "post_count": post_count,
        "position": category.position,
        "description": category.description,
        "description_text": category.description,
        "topic_url": None,
        "read_restricted": category.read_restricted,
        "permission": 1 if editable else None,
        "has_children": False,
    }
    if category.parent_category_id is not None:
        data["parent_category_id"] = category.parent_category_id
    if editable:
        data["group_permissions"] = category.group_permissions()
    return data


def groups_json(user: User, custom_ids: dict[str, int]) -> list[dict[str, Any]]:
    """``UserSerializer#groups`` (``BasicGroupSerializer``): the user's groups, automatic ones included,
    ordered by id."""
    out = []
    for name in user.group_names():
        automatic = name in AUTO_GROUPS
        gid = AUTO_GROUPS[name] if automatic else custom_ids.get(name)
        if gid is None:
            continue
        out.append({"id": gid, "automatic": automatic, "name": name, "display_name": name})
    return sorted(out, key=lambda g: g["id"])


def user_json(user: User, *, viewer: Guardian, custom_group_ids: dict[str, int]) -> dict[str, Any]:
    """``GET /u/{username}.json`` (``UserSerializer`` < ``UserCardSerializer``): ``suspended_till`` only
    while suspended, ``staged`` only to staff; ``silenced_till`` is not part of it (admin serializers)."""
    data: dict[str, Any] = {
        "id": user.id,
        "username": user.username,
        "name": None,
        "avatar_template": avatar(user.username),
        "trust_level": user.trust_level,
        "moderator": user.moderator,
        "admin": user.admin,
        "groups": groups_json(user, custom_group_ids),
    }
    if user.suspended():
        data["suspended_till"] = as_iso(user.suspended_till)
    if viewer.is_staff:
        data["staged"] = user.staged
    return data


def admin_user_json(user: User, *, custom_group_ids: dict[str, int]) -> dict[str, Any]:
    """``GET /admin/users/{id}.json`` (``AdminDetailedUserSerializer`` < ``AdminUserListSerializer``):
    ``silenced``/``silenced_till`` while silenced, ``suspended_at``/``suspended_till`` while suspended."""
    data: dict[str, Any] = {
        "id": user.id,
        "username": user.username,
        "avatar_template": avatar(user.username),
        "active": True,
        "admin": user.admin,
        "moderator": user.moderator,
        "trust_level": user.trust_level,
        "staged": user.staged,
        "groups": groups_json(user, custom_group_ids),
        "can_be_anonymized": not user.staff and not user.anonymized,
    }
    if user.silenced():
        data["silenced"] = True
        data["silenced_till"] = as_iso(user.silenced_till)
    if user.suspended():
        data["suspended_till"] = as_iso(user.suspended_till)
    return data


def reviewable_json(row: Row, *, base_url: str, topic_slug: str, post_number: int) -> dict[str, Any]:
    """``ReviewableFlaggedPostSerializer`` (``ReviewableSerializer``) as webhooks send it: ``status`` is the
    database integer (0 pending, 1 approved, 2 rejected), ``post_id`` the target."""
    url = f"/t/{topic_slug}/{row['topic_id']}/{post_number}"
    return {
        "id": row["id"],
        "type": "ReviewableFlaggedPost",
        "type_source": "core",
        "status": row["status"],
        "topic_id": row["topic_id"],
        "topic_url": f"/t/{topic_slug}/{row['topic_id']}",
        "target_type": "Post",
        "target_id": row["post_id"],
        "post_id": row["post_id"],
        "target_url": base_url + url,
        "category_id": row["category_id"],
        "created_at": as_iso(row["created_at"]),
        "score": row["score"],
        "version": row["version"],
        "target_created_by_id": row["target_created_by_id"],
        "created_from_flag?": True,
    }
