"""The local forum's moderation routes, each refused as Discourse's Guardian refuses it.

- ``PUT /t/{id}/status.json`` ``{status, enabled}`` (``TopicsController#status``): ``{"success": "OK",
  "topic_status_update": null}``; 403 unless ``can_close_topic?`` (closed, archived) or
  ``can_toggle_topic_visibility?`` (visible).
- ``POST /t/{id}/move-posts.json`` ``{post_ids, title | destination_topic_id, category_id?, archetype?}``
  (``TopicsController#move_posts``): ``{"success": true, "url"}``; 403 unless ``can_move_posts?``.
- ``PUT /posts/{id}/unhide.json`` (``PostsController#unhide``): empty 200; 403 unless staff, post hidden.
- ``POST /categories.json`` / ``PUT /categories/{id}.json`` ``{name?, slug?, parent_category_id?,
  permissions?}`` (``CategoriesController#create`` / ``#update``): ``{"category"}`` /
  ``{"success": "OK", "category"}``; 403 unless admin; ``category_created`` / ``category_updated``.
- ``GET /admin/users/{id}.json`` (``Admin::UsersController#show``): ``AdminDetailedUserSerializer``;
  404 to non-staff (the admin routes' ``StaffConstraint``).
- ``PUT /admin/users/{id}/anonymize.json`` (``Admin::UsersController#anonymize``): ``{"success": "OK",
  "username"}``; 403 unless ``can_anonymize_user?``; no webhook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum import actions
from eval.stack.forum.guardian import Category, Guardian, resolve_permissions
from eval.stack.forum.params import int_param
from eval.stack.forum.posting import truthy
from eval.stack.forum.serialize import (
    admin_user_json,
    category_json,
    error,
    forbidden,
    invalid_access,
    not_found,
    success,
)
from eval.stack.forum.store import User
from eval.stack.forum.text import slugify

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp


def emit_category(forum: ForumApp, event: str, category: Category) -> None:
    """``category_created`` / ``category_updated``: ``{"category": WebHookCategorySerializer}`` (the system
    user's view: ``read_restricted`` and ``group_permissions`` included)."""
    topics, posts = forum.store.category_counts(category.id)
    body = category_json(category, topic_count=topics, post_count=posts, editable=True)
    body.pop("permission", None)
    forum.webhooks.emit(event, {"category": body})


def moderation_routes(forum: ForumApp) -> list[Route]:
    wrap = forum.api_wrapper

    async def acting(request: Request) -> tuple[User, Guardian] | Response:
        user = await forum.user_of(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        return user, await run_in_threadpool(forum.guardian_for, user)

    async def topic_status(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        user, guardian = found
        params = await forum.params(request)
        status, enabled = params.get("status"), params.get("enabled")
        if status is None or enabled is None:
            missing = "status" if status is None else "enabled"
            return error(400, f"param is missing or the value is empty: {missing}", "invalid_parameters")
        if status not in ("closed", "archived", "visible", "pinned", "pinned_globally"):
            return error(400, "Invalid parameters: status", "invalid_parameters")
        topic = await run_in_threadpool(forum.store.topic, int(request.path_params["topic_id"]))
        allowed = (
            guardian.can_toggle_topic_visibility(topic)
            if status == "visible"
            else guardian.can_close_topic(topic)
        )
        if not allowed or topic is None:
            return forbidden()
        if status not in actions.STATUSES:
            return error(400, "Pinning is not supported by the local forum", "invalid_parameters")
        reason = None
        if status == "visible":
            reason = actions.MANUALLY_RELISTED if truthy(enabled) else actions.MANUALLY_UNLISTED

        def run() -> actions.Events:
            events = actions.Events()
            with forum.store.connection() as conn, conn.transaction():
                actions.update_status(
                    forum, conn, int(topic["id"]), str(status), truthy(enabled), user, events,
                    visibility_reason=reason,
                )  # fmt: skip
            return events

        events = await run_in_threadpool(run)
        await run_in_threadpool(events.send, forum)
        return success(topic_status_update=None)

    async def move_posts(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        user, guardian = found
        params = await forum.params(request)
        raw_ids = params.get("post_ids") or params.get("post_ids[]")
        if raw_ids is None:
            raw_ids = [v for k, v in params.items() if k.startswith("post_ids[")]
        ids = [
            i
            for i in (int_param(v) for v in (raw_ids if isinstance(raw_ids, list) else [raw_ids]))
            if i is not None
        ]
        if not ids:
            return error(400, "param is missing or the value is empty: post_ids", "invalid_parameters")
        topic = await run_in_threadpool(forum.store.topic, int(request.path_params["topic_id"]))
        if not guardian.can_move_posts(topic) or topic is None:
            return forbidden()
        title = params.get("title") or None
        category_id = int_param(params.get("category_id"))
        if title and category_id is not None and not guardian.can_create_topic_on_category(category_id):
            return forbidden()
        try:
            dest_id = int_param(params.get("destination_topic_id"))
            dest, events = await run_in_threadpool(
                lambda: actions.move_posts(
                    forum, topic, user, ids, title=title, destination_topic_id=dest_id,
                    category_id=category_id, archetype=params.get("archetype") or None,
                )
            )  # fmt: skip
        except actions.MoveError as exc:
            if exc.status == 403:
                return forbidden()
            if exc.status == 404:
                return not_found()
            return error(exc.status, f"Invalid parameters: {exc}", "invalid_parameters")
        await run_in_threadpool(events.send, forum)
        return JSONResponse({"success": True, "url": f"/t/{dest['slug']}/{dest['id']}"})

    async def unhide(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        _, guardian = found
        post = await run_in_threadpool(forum.store.post, int(request.path_params["post_id"]))
        topic = await run_in_threadpool(forum.store.topic, int(post["topic_id"])) if post else None
        if post is None or topic is None:
            return not_found()
        if not guardian.can_see_post(post, topic):
            return forbidden()
        if not guardian.can_unhide(post):
            return forbidden()

        def run() -> actions.Events:
            events = actions.Events()
            with forum.store.connection() as conn, conn.transaction():
                actions.unhide_post(forum, conn, post, events)
            return events

        events = await run_in_threadpool(run)
        await run_in_threadpool(events.send, forum)
        return Response(status_code=200)

    def category_from(params: dict[str, Any], base: Category | None, new_id: int) -> Category | str:
        name = params.get("name", base.name if base else None)
        if not isinstance(name, str) or not name.strip():
            return "name"
        read_restricted = base.read_restricted if base else False
        permissions = dict(base.permissions) if base else {}
        given = actions.parse_permissions(params)
        if given is not None:
            try:
                read_restricted, permissions = resolve_permissions(given)
            except (TypeError, ValueError):
                return "permissions"
        parent = params.get("parent_category_id", base.parent_category_id if base else None)
        return Category(
            id=base.id if base else new_id,
            name=name.strip(),
            slug=str(params.get("slug") or (base.slug if base else slugify(name))),
            parent_category_id=int_param(parent),
            read_restricted=read_restricted,
            permissions=permissions,
            description=params.get("description", base.description if base else None),
            color=str(params.get("color") or (base.color if base else "0088CC")),
            text_color=str(params.get("text_color") or (base.text_color if base else "FFFFFF")),
            position=base.position if base else new_id,
        )

    async def create_category(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        _, guardian = found
        if not guardian.can_create_category():
            return forbidden()
        params = await forum.params(request)
        new_id = await run_in_threadpool(forum.store.next_category_id)
        category = category_from(params, None, new_id)
        if isinstance(category, str):
            return error(400, f"param is missing or the value is empty: {category}", "invalid_parameters")
        await run_in_threadpool(forum.store.save_category, category)
        await run_in_threadpool(emit_category, forum, "category_created", category)
        return JSONResponse({"category": category_json(category, editable=True)})

    async def update_category(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        _, guardian = found
        categories = await run_in_threadpool(forum.store.categories)
        base = categories.get(int(request.path_params["category_id"]))
        if base is None:
            return not_found()
        if not guardian.can_edit_category():
            return forbidden()
        params = await forum.params(request)
        category = category_from(params, base, base.id)
        if isinstance(category, str):
            return error(422, f"{category} is invalid", "invalid_parameters")
        await run_in_threadpool(forum.store.save_category, category)
        await run_in_threadpool(emit_category, forum, "category_updated", category)
        topics, posts = await run_in_threadpool(forum.store.category_counts, category.id)
        body = category_json(category, topic_count=topics, post_count=posts, editable=True)
        return success(category=body)

    async def admin_user(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        _, guardian = found
        target = await run_in_threadpool(forum.store.user_by_id, int(request.path_params["user_id"]))
        if not guardian.is_staff or target is None:
            return not_found()
        ids = await run_in_threadpool(forum.store.group_ids, list(target.groups))
        return JSONResponse(admin_user_json(target, custom_group_ids=ids))

    async def anonymize(request: Request) -> Response:
        found = await acting(request)
        if isinstance(found, Response):
            return found
        _, guardian = found
        target = await run_in_threadpool(forum.store.user_by_id, int(request.path_params["user_id"]))
        if not guardian.is_staff:
            return not_found()
        if target is None:
            return not_found()
        if not guardian.can_anonymize_user(target):
            return forbidden()
        username = await run_in_threadpool(actions.anonymize, forum, target)
        return success(username=username)

    return [
        Route("/t/{topic_id:int}/status.json", wrap(topic_status), methods=["PUT"]),
        Route("/t/{topic_id:int}/move-posts.json", wrap(move_posts), methods=["POST"]),
        Route("/posts/{post_id:int}/unhide.json", wrap(unhide), methods=["PUT"]),
        Route("/categories.json", wrap(create_category), methods=["POST"]),
        Route("/categories/{category_id:int}.json", wrap(update_category), methods=["PUT"]),
        Route("/admin/users/{user_id:int}.json", wrap(admin_user), methods=["GET"]),
        Route("/admin/users/{user_id:int}/anonymize.json", wrap(anonymize), methods=["PUT"]),
    ]
