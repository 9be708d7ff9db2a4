"""``POST /posts.json``: ``PostsController#create`` → ``NewPostManager`` → ``PostCreator`` / ``TopicCreator``,
with the Guardian's checks and the events ``PostCreator#trigger_after_events`` sends.

- ``whisper=true`` (``PostsController#create_params``) makes a whisper (post_type 4) for a whisperer;
  anyone else gets 403 ``invalid_access`` (``invalid_whisper_access``).
- A reply needs ``Guardian#can_create?(Post, topic)``: a topic the user can see, not deleted, open unless
  they are an admin, a moderator or trust level 4, and ``can_create_post?`` (a silenced user only in a PM
  that lists them). Refused: 422 ``{"action", "errors": [topic_not_found]}`` (``PostCreator#valid?``).
- A new topic needs ``ensure_can_create!(Topic, category)`` (403) and an existing category (400); a PM
  needs recipients the user may message (``can_send_private_message?``: a silenced user only staff).
- A suspended user gets 422 (``PostCreator#valid?``: ``user_is_suspended``).
- Events: ``topic_created`` for a new topic, then ``post_created``; mentioned and replied-to users are
  notified only where they can see the post (``PostAlerter``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from eval.stack.forum.guardian import PRIVATE_MESSAGE, REGULAR, WHISPER
from eval.stack.forum.params import int_param
from eval.stack.forum.serialize import (
    error,
    forbidden,
    invalid_access,
    pending_post_json,
    post_json,
    webhook_post_json,
)
from eval.stack.forum.store import Row, User, as_iso
from eval.stack.forum.text import cook, html_to_text, mentioned_usernames, slugify

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp

MENTIONED, REPLIED, PRIVATE_MESSAGE_NOTIFICATION = 1, 2, 6
# server.en.yml texts (the keys are Discourse's; the wording is close, not checked letter for letter).
TOPIC_NOT_FOUND = (
    "Something went wrong. Perhaps this topic was closed or deleted while you were looking at it?"
)
USER_IS_SUSPENDED = "Suspended users are not allowed to post."
INVALID_WHISPER_ACCESS = "Either whispers are not enabled or you do not have access to create whisper posts"
NO_USER_SELECTED = "You must choose a valid user."
CANT_SEND_PM = "Sorry, you cannot send a message to that user."


def _refused(*messages: str) -> JSONResponse:
    return JSONResponse({"action": "create_post", "errors": list(messages)}, status_code=422)


def truthy(value: object) -> bool:
    """A ``"true"`` parameter (Discourse compares strings; a JSON ``true`` is taken too)."""
    return str(value).lower() == "true"


async def create_post(forum: ForumApp, request: Request) -> Response:
    user = await forum.user_of(request)
    if isinstance(user, Response):
        return user
    if user is None:
        return invalid_access()
    params = await forum.params(request)
    raw = params.get("raw")
    if not isinstance(raw, str):
        return error(400, "param is missing or the value is empty: raw", "invalid_parameters")
    return await run_in_threadpool(create_post_sync, forum, user, params, raw)


def create_post_sync(forum: ForumApp, user: User, params: dict[str, Any], raw: str) -> Response:
    config = forum.config
    guardian = forum.guardian_for(user)
    whisper = truthy(params.get("whisper"))
    if whisper and not guardian.can_create_whisper():
        return forbidden(INVALID_WHISPER_ACCESS)
    errors = []
    if len(raw.strip()) < config.min_post_length:
        errors.append(f"Body is too short (minimum is {config.min_post_length} characters)")
    topic_id = int_param(params.get("topic_id"))
    title = params.get("title")
    if topic_id is None and (not isinstance(title, str) or len(title.strip()) < config.min_title_length):
        errors.append(f"Title is too short (minimum is {config.min_title_length} characters)")
    if errors:
        return _refused(*errors)
    if guardian.is_suspended:
        return _refused(USER_IS_SUSPENDED)
    archetype = "private_message" if params.get("archetype") == PRIVATE_MESSAGE else "regular"
    category_id = int_param(params.get("category")) if archetype == "regular" else None
    if archetype == "regular" and category_id is None:
        category_id = config.uncategorized_category_id  # Topic#ensure_topic_has_a_category
    if topic_id is not None:
        if not guardian.can_create_post_on_topic(forum.store.topic(topic_id)):
            return _refused(TOPIC_NOT_FOUND)
    elif archetype == "regular":
        if category_id is not None and category_id not in guardian.categories:
            return error(400, "category", "invalid_parameters")
        if not guardian.can_create_topic_on_category(category_id) or not guardian.can_see_category(
            category_id
        ):
            return forbidden()
    held = {n.strip().lower() for n in forum.faults.hold_for_review.split(",") if n.strip()}
    if user.username.lower() in held and not user.admin:
        # NewPostManager: the post waits in the review queue (staff are exempt); no post, no webhook.
        pending_id, count = forum.hold(user.username, topic_id, raw)
        created = as_iso(datetime.now(UTC)) or ""
        return JSONResponse(pending_post_json(pending_id, raw, cook(raw), created, count))
    existing = forum.store.recent_identical(user.id, topic_id, raw, config.identical_post_window_s)
    if existing is not None:
        post = forum.store.post(existing)
        if post is not None:
            return JSONResponse(post_json(post, guardian=guardian))
    reply_to = int_param(params.get("reply_to_post_number"))
    recipients: list[User] = []
    with forum.store.connection() as conn, conn.transaction():
        new_topic = topic_id is None
        if topic_id is None:
            if archetype == PRIVATE_MESSAGE:
                names = [
                    n.strip() for n in str(params.get("target_recipients") or "").split(",") if n.strip()
                ]
                recipients = forum.store.users_by_names(conn, names)
                if not recipients:
                    return _refused(NO_USER_SELECTED)
                if guardian.is_silenced and not all(r.staff for r in recipients):
                    return _refused(CANT_SEND_PM)
            allowed = [user.id, *(r.id for r in recipients)] if archetype == PRIVATE_MESSAGE else []
            topic_id = forum.store.create_topic(
                conn, user, str(title).strip(), slugify(str(title)), category_id, archetype, allowed
            )
            reply_to = None
        elif reply_to is not None:
            found = conn.execute(
                "SELECT 1 FROM forum.posts WHERE topic_id = %s AND post_number = %s", (topic_id, reply_to)
            ).fetchone()
            reply_to = reply_to if found else None
        cooked = cook(raw)
        post_id = forum.store.insert_post(
            conn, user, topic_id, raw, cooked, html_to_text(cooked), reply_to,
            post_type=WHISPER if whisper and not new_topic else REGULAR,
        )  # fmt: skip
        post = forum.store.post(post_id, conn)
        if post is None:  # pragma: no cover - just inserted
            return error(500, "post vanished", "server_error")
        notify(forum, conn, user, post, recipients if new_topic else [])
    if new_topic:
        forum.emit_topic("topic_created", topic_id)
    forum.emit_post("post_created", post_id)
    return JSONResponse(post_json(post, guardian=guardian, suppress_quoting=forum.suppress_quoting()))


def notify(forum: ForumApp, conn: Any, author: User, post: Row, recipients: list[User]) -> None:
    """Mentions (type 1), a reply to someone's post (2), a new PM (6); one per user, never the author,
    and only to a user who can see the post (``PostAlerter`` → ``can_receive_post_notifications?``)."""
    topic = forum.store.topic(int(post["topic_id"]), conn)
    notified: set[int] = {author.id}

    def may_see(target: User) -> bool:
        return topic is not None and forum.guardian_for(target).can_see_post(post, topic)

    for target in recipients:
        if target.id not in notified and may_see(target):
            forum.store.add_notification(conn, target.id, PRIVATE_MESSAGE_NOTIFICATION, post, author)
            notified.add(target.id)
    for target in forum.store.users_by_names(conn, mentioned_usernames(post["raw"])):
        if target.id not in notified and may_see(target):
            forum.store.add_notification(conn, target.id, MENTIONED, post, author)
            notified.add(target.id)
    replied_to = post.get("reply_to_user_id")
    if replied_to is not None and int(replied_to) not in notified:
        replied = forum.store.user_by_id(int(replied_to))
        if replied is not None and may_see(replied):
            forum.store.add_notification(conn, replied.id, REPLIED, post, author)


def webhook_body(forum: ForumApp, post_id: int) -> dict[str, Any] | None:
    """``{"post": WebHookPostSerializer}`` for the post as it is now (None if it is gone)."""
    post = forum.store.post(post_id)
    topic = forum.store.topic(int(post["topic_id"])) if post else None
    if post is None or topic is None:
        return None
    return {
        "post": webhook_post_json(post, int(topic["posts_count"]), suppress_quoting=forum.suppress_quoting())
    }
