"""The local forum's read routes, each answered as the caller's ``Guardian`` allows.

``GET /t/{id}.json`` (``TopicsController#show`` → ``TopicView``), ``GET /t/{id}/posts.json``
(``TopicsController#posts``), ``GET /posts/{id}.json`` and ``/posts/by_number/{topic}/{n}.json``
(``PostsController#show``/``#by_number`` → ``find_post_using``), ``GET /posts.json``
(``PostsController#latest``), ``GET /site.json`` (``Site#categories``), ``GET /search.json``
(``Search#posts_query``), ``GET /notifications.json``, ``GET /u/{username}.json``
(``UsersController#show``), ``GET /c/{id}/show.json`` (``CategoriesController#show``), ``GET
/tag_groups.json`` (``TagGroupsController#index``).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum import search as forum_search
from eval.stack.forum.guardian import PRIVATE_MESSAGE, Guardian
from eval.stack.forum.params import int_param
from eval.stack.forum.serialize import (
    avatar,
    category_json,
    error,
    forbidden,
    invalid_access,
    not_found,
    not_logged_in,
    notification_json,
    post_json,
    topic_json,
    user_json,
)
from eval.stack.forum.store import Row, User

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp


def stream_posts(
    forum: ForumApp, guardian: Guardian, topic_id: int, post_ids: list[int] | None = None
) -> list[Row]:
    """``TopicView#filtered_posts``: the topic's posts of a type the user sees (``filter_post_types``: or
    their own), deleted ones left out except a deleted first post for staff. Hidden posts stay in the
    stream (their text is withheld by the serializer)."""
    rows = forum.store.topic_posts(topic_id, post_ids, deleted_first_post=guardian.can_see_deleted_topics())
    types = guardian.visible_post_types()
    me = guardian.user.id if guardian.user else None
    return [p for p in rows if p["post_type"] in types or (me is not None and p["user_id"] == me)]


def read_routes(forum: ForumApp) -> list[Route]:
    """The read routes bound to ``forum``, each wrapped by ``forum.api_wrapper`` (limits, faults, log)."""
    wrap = forum.api_wrapper

    async def viewer(request: Request) -> tuple[User | None, Guardian] | Response:
        user = await forum.user_of(request)
        if isinstance(user, Response):
            return user
        return user, await run_in_threadpool(forum.guardian_for, user)

    async def get_topic(request: Request) -> Response:
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        topic_id = int(request.path_params["topic_id"])
        topic = await run_in_threadpool(forum.store.topic, topic_id)
        # TopicsController#show answers 404 for InvalidAccess and NotLoggedIn alike (no detailed_404).
        if topic is None or not guardian.can_see_topic(topic):
            return not_found()
        posts = await run_in_threadpool(stream_posts, forum, guardian, topic_id)
        suppress = await run_in_threadpool(forum.suppress_quoting)
        allowed: list[Row] = []
        if topic["archetype"] == PRIVATE_MESSAGE:
            allowed = await run_in_threadpool(forum.store.users_by_ids, list(topic["allowed_user_ids"] or []))
        return JSONResponse(
            topic_json(topic, posts, guardian=guardian, suppress_quoting=suppress, allowed_users=allowed)
        )

    async def get_topic_posts(request: Request) -> Response:
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        user, guardian = seen
        topic_id = int(request.path_params["topic_id"])
        topic = await run_in_threadpool(forum.store.topic, topic_id)
        if topic is None:
            return not_found()
        # TopicView#check_and_raise_exceptions, not rescued by TopicsController#posts.
        if topic["archetype"] == PRIVATE_MESSAGE and user is None:
            return not_logged_in()
        if not guardian.can_see_topic(topic):
            return forbidden()
        try:
            ids = [int(v) for v in request.query_params.getlist("post_ids[]")]
        except ValueError:
            return error(400, "post_ids must be integers", "invalid_parameters")
        posts = await run_in_threadpool(stream_posts, forum, guardian, topic_id, ids)
        suppress = await run_in_threadpool(forum.suppress_quoting)
        body = [post_json(p, with_raw=False, guardian=guardian, suppress_quoting=suppress) for p in posts]
        return JSONResponse({"post_stream": {"posts": body}, "id": topic_id})

    async def get_post(request: Request) -> Response:
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        post = await run_in_threadpool(forum.store.post, int(request.path_params["post_id"]))
        return await post_answer(post, seen[1])

    async def get_post_by_number(request: Request) -> Response:
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        post = await run_in_threadpool(
            forum.store.post_by_number,
            int(request.path_params["topic_id"]),
            int(request.path_params["post_number"]),
        )
        return await post_answer(post, seen[1])

    async def post_answer(post: Row | None, guardian: Guardian) -> Response:
        """``PostsController#find_post_using``: 404 when missing, or deleted (post or topic) to a user who
        cannot moderate the topic; 403 when ``can_see_post?`` refuses."""
        if post is None:
            return not_found()
        topic = await run_in_threadpool(forum.store.topic, int(post["topic_id"]))
        if topic is None:
            return not_found()
        deleted = post["deleted_at"] is not None or topic["deleted_at"] is not None
        if deleted and not guardian.can_moderate_topic(topic):
            return not_found()
        if not guardian.can_see_post(post, topic):
            return forbidden()
        suppress = await run_in_threadpool(forum.suppress_quoting)
        return JSONResponse(post_json(post, guardian=guardian, suppress_quoting=suppress))

    async def latest_posts(request: Request) -> Response:
        """``GET /posts.json[?before=id]`` (``PostsController#latest`` → ``LatestPostsQuery#public_posts``):
        the newest regular posts below ``before`` (``before`` <= 0 is ignored), ``ORDER BY id DESC``, a page
        of ``latest_posts_page`` (``PAGE_SIZE = 50``), in the categories the caller may see, serialized
        with ``add_raw``, ``add_excerpt`` and ``add_title`` (``topic_title``, ``topic_html_title``,
        ``category_id``). Edits do not bring a post back: the order is by id only."""
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        before = int_param(request.query_params.get("before"))
        if before is not None and before <= 0:
            before = None
        allowed = None if guardian.is_admin else sorted(guardian.allowed_category_ids())
        rows = await run_in_threadpool(
            lambda: forum.store.latest_posts(before, forum.config.latest_posts_page, category_ids=allowed)
        )
        suppress = await run_in_threadpool(forum.suppress_quoting)
        posts = []
        for row in rows:
            data = post_json(row, guardian=guardian, suppress_quoting=suppress)
            data["topic_title"] = row["topic_title"]
            data["topic_html_title"] = html.escape(str(row["topic_title"] or ""), quote=False)
            data["category_id"] = row["category_id"]
            data["excerpt"] = _excerpt(str(row["plain"] or ""))
            posts.append(data)
        return JSONResponse({"latest_posts": posts})

    async def site(request: Request) -> Response:
        """``GET /site.json``: the categories the caller may see (the rest of the site object is left out);
        with ``lazy_load_categories`` only their sidebar categories and those categories' ancestors."""
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        user, guardian = seen
        sidebar = forum.config.sidebar_category_ids
        if user is not None and user.sidebar_category_ids is not None:
            sidebar = user.sidebar_category_ids
        chosen = guardian.site_categories(lazy=forum.config.lazy_load_categories, sidebar_ids=sidebar)
        parents = {c.parent_category_id for c in chosen if c.parent_category_id is not None}
        categories = []
        for c in chosen:
            data = category_json(c, editable=guardian.can_edit_category())
            data["has_children"] = c.id in parents
            data.pop("group_permissions", None)
            categories.append(data)
        return JSONResponse({"categories": categories})

    async def search(request: Request) -> Response:
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        q = request.query_params.get("q") or request.query_params.get("term") or ""
        try:
            page = int(request.query_params.get("page") or 1)
            result = await run_in_threadpool(
                lambda: forum_search.search(forum.store, q, guardian=guardian, page=page)
            )
        except forum_search.SearchTermTooShort as exc:
            return error(400, str(exc), "invalid_parameters")
        except ValueError:
            return error(400, "page must be an integer", "invalid_parameters")
        return JSONResponse(forum_search.as_json(result, avatar, guardian))

    async def notifications(request: Request) -> Response:
        user = await forum.user_of(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        try:
            offset = max(0, int(request.query_params.get("offset", "0")))
        except ValueError:
            return error(400, "offset must be an integer", "invalid_parameters")
        rows = await run_in_threadpool(forum.store.notifications, user.id, 60, offset)
        return JSONResponse(
            {
                "notifications": [notification_json(r) for r in rows],
                "total_rows_notifications": len(rows),
                "seen_notification_id": rows[0]["id"] if rows else None,
                "load_more_notifications": f"/notifications?offset={offset + 60}",
            }
        )

    async def user_profile(request: Request) -> Response:
        """``GET /u/{username}.json``: ``{"user": UserSerializer, "user_badges": []}``; 404 if missing."""
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        target = await run_in_threadpool(forum.store.user, str(request.path_params["username"]))
        if target is None:
            return not_found()
        ids = await run_in_threadpool(forum.store.group_ids, list(target.groups))
        body = user_json(target, viewer=guardian, custom_group_ids=ids)
        return JSONResponse({"user_badges": [], "user": body})

    async def show_category(request: Request) -> Response:
        """``GET /c/{id}/show.json`` (``CategoriesController#show``): ``{"category": CategorySerializer}``;
        404 for a category the forum lacks, 403 for one the caller may not see (``ensure_can_see!``)."""
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        category = guardian.categories.get(int(request.path_params["category_id"]))
        if category is None:
            return not_found()
        if not guardian.can_see_category(category.id):
            return invalid_access()
        return JSONResponse({"category": category_json(category, editable=guardian.can_edit_category())})

    async def tag_groups(request: Request) -> Response:
        """``GET /tag_groups.json`` (``TagGroupsController#index``, staff only): the staff-only tags as one
        group whose permissions name staff (group 3), as ``TagGroupSerializer`` shows it."""
        seen = await viewer(request)
        if isinstance(seen, Response):
            return seen
        _, guardian = seen
        if not guardian.is_staff:
            return invalid_access()
        tags = [{"id": i, "name": t, "slug": t} for i, t in enumerate(forum.config.staff_only_tags, 1)]
        groups = [{"id": 1, "name": "Staff only", "tags": tags, "parent_tag": [], "one_per_topic": False,
                   "permissions": {"3": 1}}] if tags else []  # fmt: skip
        return JSONResponse({"tag_groups": groups})

    return [
        Route("/c/{category_id:int}/show.json", wrap(show_category), methods=["GET"]),
        Route("/tag_groups.json", wrap(tag_groups), methods=["GET"]),
        Route("/t/{topic_id:int}.json", wrap(get_topic), methods=["GET"]),
        Route("/t/{slug}/{topic_id:int}.json", wrap(get_topic), methods=["GET"]),
        Route("/t/{topic_id:int}/posts.json", wrap(get_topic_posts), methods=["GET"]),
        Route("/posts/{post_id:int}.json", wrap(get_post), methods=["GET"]),
        Route(
            "/posts/by_number/{topic_id:int}/{post_number:int}.json",
            wrap(get_post_by_number),
            methods=["GET"],
        ),
        Route("/posts.json", wrap(latest_posts), methods=["GET"]),
        Route("/site.json", wrap(site), methods=["GET"]),
        Route("/search.json", wrap(search), methods=["GET"]),
        Route("/notifications.json", wrap(notifications), methods=["GET"]),
        Route("/u/{username}.json", wrap(user_profile), methods=["GET"]),
    ]


def _excerpt(plain: str, length: int = 300) -> str:
    """``Post#excerpt`` at ``post_excerpt_maxlength`` (300): the text, cut with an ellipsis entity."""
    text = html.escape(" ".join(plain.split()), quote=False)
    return text if len(text) <= length else text[:length] + "&hellip;"
