"""The local forum's HTTP API: the subset of Discourse the bot uses, with Discourse's shapes and errors.

Routes: ``GET /t/{id}.json``, ``GET /t/{id}/posts.json?post_ids[]=…``, ``GET /posts/{id}.json`` (with
raw), ``GET /search.json``, ``POST /posts.json``, ``PUT``/``DELETE /posts/{id}.json``,
``PUT /posts/{id}/recover.json``, ``GET /admin/site_settings.json``, ``PUT
/admin/site_settings/{name}.json``, ``GET /notifications.json``; test controls under ``/__forum/``
(faults, users, webhook log and redelivery). Auth: ``Api-Key`` (the one configured key, acting as any
existing user, like an "All users" key) + ``Api-Username``; reads of public topics need no key.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum import search as forum_search
from eval.stack.forum.controls import control_routes
from eval.stack.forum.limits import SlidingWindowLimiter, rate_limited
from eval.stack.forum.pages import page_routes
from eval.stack.forum.serialize import (
    error,
    invalid_access,
    not_found,
    notification_json,
    pending_post_json,
    post_json,
    site_setting_json,
    topic_json,
    webhook_post_json,
    webhook_topic_json,
)
from eval.stack.forum.store import ForumStore, Row, User, as_iso
from eval.stack.forum.text import cook, html_to_text, mentioned_usernames, slugify
from eval.stack.forum.webhooks import Faults, WebhookSender

MENTIONED, REPLIED, PRIVATE_MESSAGE = 1, 2, 6


@dataclass
class ForumConfig:
    """How the local forum behaves; every field has a Discourse-like default."""

    api_key: str = "local-forum-key"
    # Stands for members' and admins' browser sessions (tests act as them with it): it acts as any user
    # like the API key, but is not an API key, so Discourse's admin-API limit does not count it.
    session_key: str = "local-forum-session"
    base_url: str = "http://127.0.0.1:4200"
    bot_username: str = "citebot"
    admins: tuple[str, ...] = ("system",)
    webhook_url: str | None = None
    webhook_secret: str = ""
    identical_post_window_s: float = 120.0
    min_post_length: int = 20
    min_title_length: int = 15
    # Discourse's max_admin_api_reqs_per_minute (DISCOURSE_MAX_ADMIN_API_REQS_PER_MINUTE): one bucket
    # for every request with the key. Tests may shorten the window to keep the same ratio faster.
    admin_api_reqs_per_minute: int = 60
    admin_api_window_s: float = 60.0
    bot_admin: bool = True
    faults: Faults = field(default_factory=Faults)
    # ``/site.json``'s categories by id: (name, read_restricted); any other is "Category <id>", public.
    categories: dict[int, tuple[str, bool]] = field(default_factory=dict)
    latest_posts_page: int = 50  # posts a page of ``GET /posts.json`` (Discourse: 50)


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One API request as the forum saw it (the request log tests and benches read)."""

    at: float
    method: str
    path: str
    query: str
    keyed: bool
    status: int


Handler = Callable[[Request], Awaitable[Response]]


class ForumApp:
    """Holds the store, the config and the webhook sender; ``app`` is the Starlette application."""

    def __init__(self, store: ForumStore, config: ForumConfig) -> None:
        self.store = store
        self.config = config
        self.faults = config.faults
        self.webhooks = WebhookSender(config.webhook_url, config.webhook_secret, config.base_url, self.faults)
        self.bot = store.ensure_user(config.bot_username, admin=config.bot_admin)
        self.api_limiter = SlidingWindowLimiter(config.admin_api_reqs_per_minute, config.admin_api_window_s)
        self.calls: list[ApiCall] = []
        self.pending_posts: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()
        for name in config.admins:
            store.ensure_user(name, admin=True)
        api = self._api
        self.app = Starlette(
            routes=[
                Route("/t/{topic_id:int}.json", api(self.get_topic), methods=["GET"]),
                Route("/t/{slug}/{topic_id:int}.json", api(self.get_topic), methods=["GET"]),
                Route("/t/{topic_id:int}/posts.json", api(self.get_topic_posts), methods=["GET"]),
                Route("/posts/{post_id:int}.json", api(self.get_post), methods=["GET"]),
                Route("/posts.json", api(self.create_post), methods=["POST"]),
                Route("/posts.json", api(self.latest_posts), methods=["GET"]),
                Route("/site.json", api(self.site), methods=["GET"]),
                Route("/posts/{post_id:int}.json", api(self.edit_post), methods=["PUT"]),
                Route("/posts/{post_id:int}.json", api(self.delete_post), methods=["DELETE"]),
                Route("/posts/{post_id:int}/recover.json", api(self.recover_post), methods=["PUT"]),
                Route(
                    "/posts/by_number/{topic_id:int}/{post_number:int}.json",
                    api(self.get_post_by_number),
                    methods=["GET"],
                ),
                Route("/t/{topic_id:int}.json", api(self.delete_topic), methods=["DELETE"]),
                Route("/t/{topic_id:int}/recover.json", api(self.recover_topic), methods=["PUT"]),
                Route("/search.json", api(self.search), methods=["GET"]),
                Route("/notifications.json", api(self.notifications), methods=["GET"]),
                Route("/admin/site_settings.json", api(self.site_settings), methods=["GET"]),
                Route("/admin/site_settings/{name}.json", api(self.set_site_setting), methods=["PUT"]),
                *control_routes(self),
                *page_routes(self),
            ]
        )
        self.app.state.forum = self

    def close(self) -> None:
        self.webhooks.close()

    # -- plumbing --------------------------------------------------------------------------------

    def _api(self, handler: Handler) -> Handler:
        """Wrap an API route with Discourse's admin-API limit, the fault knobs (latency, 429, 5xx), like a
        busy Discourse, and the request log."""

        async def wrapped(request: Request) -> Response:
            response = await self._answer(request, handler)
            call = ApiCall(
                time.monotonic(),
                request.method,
                request.url.path,
                request.url.query,
                request.headers.get("api-key") == self.config.api_key,
                response.status_code,
            )
            with self._log_lock:
                self.calls.append(call)
            return response

        return wrapped

    async def _answer(self, request: Request, handler: Handler) -> Response:
        if self.faults.latency_s > 0:
            await run_in_threadpool(time.sleep, self.faults.latency_s)
        if request.headers.get("api-key") == self.config.api_key:
            wait = self.api_limiter.perform()
            if wait is not None:
                return rate_limited(wait)
        if self.faults.take("rate_limit_next"):
            return rate_limited(self.faults.retry_after_s)
        if self.faults.take("errors_next"):
            return Response(
                "<html><body>Bad gateway</body></html>", self.faults.error_status, media_type="text/html"
            )
        return await handler(request)

    async def _user(self, request: Request) -> User | Response | None:
        """The acting user: None when anonymous, a 403 response when the key or username is wrong."""
        key = request.headers.get("api-key")
        if key is None:
            return None
        if key not in (self.config.api_key, self.config.session_key):
            return invalid_access()
        username = request.headers.get("api-username") or "system"
        user = await run_in_threadpool(self.store.user, username)
        return user if user is not None else invalid_access()

    # -- reads -----------------------------------------------------------------------------------

    async def get_topic(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        topic_id = int(request.path_params["topic_id"])
        topic = await run_in_threadpool(self.store.topic, topic_id)
        if topic is None or not self._can_see(topic, user):
            return not_found()
        posts = await run_in_threadpool(self.store.topic_posts, topic_id)
        suppress = await run_in_threadpool(self._suppress_quoting)
        return JSONResponse(
            topic_json(topic, posts, viewer_id=user.id if user else None, suppress_quoting=suppress)
        )

    async def get_topic_posts(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        topic_id = int(request.path_params["topic_id"])
        topic = await run_in_threadpool(self.store.topic, topic_id)
        if topic is None or not self._can_see(topic, user):
            return not_found()
        try:
            ids = [int(v) for v in request.query_params.getlist("post_ids[]")]
        except ValueError:
            return error(400, "post_ids must be integers", "invalid_parameters")
        posts = await run_in_threadpool(self.store.topic_posts, topic_id, ids)
        viewer = user.id if user else None
        suppress = await run_in_threadpool(self._suppress_quoting)
        return JSONResponse(
            {
                "post_stream": {
                    "posts": [
                        post_json(p, with_raw=False, viewer_id=viewer, suppress_quoting=suppress)
                        for p in posts
                    ]
                },
                "id": topic_id,
            }
        )

    async def get_post(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        post = await run_in_threadpool(self.store.post, int(request.path_params["post_id"]))
        return await self._post_answer(post, user)

    async def get_post_by_number(self, request: Request) -> Response:
        """``GET /posts/by_number/{topic_id}/{post_number}.json``: the post at that place of the topic."""
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        post = await run_in_threadpool(
            self.store.post_by_number,
            int(request.path_params["topic_id"]),
            int(request.path_params["post_number"]),
        )
        return await self._post_answer(post, user)

    async def _post_answer(self, post: Row | None, user: User | None) -> Response:
        # A deleted post is 404 except to staff, who get it with its deleted_at.
        if post is None or (post["deleted_at"] is not None and not (user and user.admin)):
            return not_found()
        topic = await run_in_threadpool(self.store.topic, int(post["topic_id"]))
        if topic is None or not self._can_see(topic, user):
            return not_found()
        suppress = await run_in_threadpool(self._suppress_quoting)
        return JSONResponse(post_json(post, viewer_id=user.id if user else None, suppress_quoting=suppress))

    async def latest_posts(self, request: Request) -> Response:
        """``GET /posts.json[?before=id]``: the newest public posts below ``before`` (a page of
        ``latest_posts_page``), with raw."""
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        before = _int(request.query_params.get("before"))
        rows = await run_in_threadpool(self.store.latest_posts, before, self.config.latest_posts_page)
        suppress = await run_in_threadpool(self._suppress_quoting)
        posts = []
        for row in rows:
            data = post_json(row, viewer_id=user.id if user else None, suppress_quoting=suppress)
            data["category_id"] = row["category_id"]
            posts.append(data)
        return JSONResponse({"latest_posts": posts})

    async def site(self, request: Request) -> Response:
        """``GET /site.json``: the categories (the rest of Discourse's site object is left out)."""
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        ids = await run_in_threadpool(self.store.category_ids)
        named = self.config.categories
        categories = [
            {
                "id": c,
                "name": named.get(c, (f"Category {c}", False))[0],
                "slug": f"category-{c}",
                "read_restricted": named.get(c, ("", False))[1],
            }
            for c in ids
        ]
        return JSONResponse({"categories": categories})

    async def search(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        q = request.query_params.get("q") or request.query_params.get("term") or ""
        try:
            page = int(request.query_params.get("page") or 1)
            result = await run_in_threadpool(forum_search.search, self.store, q, page=page)
        except forum_search.SearchTermTooShort as exc:
            return error(400, str(exc), "invalid_parameters")
        except ValueError:
            return error(400, "page must be an integer", "invalid_parameters")
        from eval.stack.forum.serialize import avatar

        return JSONResponse(forum_search.as_json(result, avatar))

    async def notifications(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        try:
            offset = max(0, int(request.query_params.get("offset", "0")))
        except ValueError:
            return error(400, "offset must be an integer", "invalid_parameters")
        rows = await run_in_threadpool(self.store.notifications, user.id, 60, offset)
        return JSONResponse(
            {
                "notifications": [notification_json(r) for r in rows],
                "total_rows_notifications": len(rows),
                "seen_notification_id": rows[0]["id"] if rows else None,
                "load_more_notifications": f"/notifications?offset={offset + 60}",
            }
        )

    # -- admin -----------------------------------------------------------------------------------

    async def site_settings(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None or not user.admin:
            return invalid_access()
        # Admin::SiteSettingsController#index permits `categories` and `plugin` only.
        categories = [c for c in (request.query_params.get("categories") or "").split(",") if c]
        plugin = request.query_params.get("plugin") or None
        rows = await run_in_threadpool(lambda: self.store.site_settings(plugin=plugin, categories=categories))
        return JSONResponse({"site_settings": [site_setting_json(r) for r in rows], "diags": {}})

    async def set_site_setting(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None or not user.admin:
            return invalid_access()
        name = str(request.path_params["name"])
        params = await _params(request)
        if name not in params:
            return error(400, f"param is missing or the value is empty: {name}", "invalid_parameters")
        value = params[name]
        value = ("true" if value else "false") if isinstance(value, bool) else str(value)
        settings = {r["name"]: r for r in await run_in_threadpool(self.store.site_settings)}
        if name not in settings:
            return not_found()
        if settings[name]["type"] == "bool" and value not in ("true", "false"):
            return error(422, f"Value of {name} must be true or false", "invalid_parameters")
        await run_in_threadpool(self.store.set_site_setting, name, value)
        return Response(status_code=200)

    # -- writes ----------------------------------------------------------------------------------

    async def create_post(self, request: Request) -> Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        params = await _params(request)
        raw = params.get("raw")
        if not isinstance(raw, str):
            return error(400, "param is missing or the value is empty: raw", "invalid_parameters")
        return await run_in_threadpool(self._create_post_sync, user, params, raw)

    def _create_post_sync(self, user: User, params: dict[str, Any], raw: str) -> Response:
        errors = []
        if len(raw.strip()) < self.config.min_post_length:
            errors.append(f"Body is too short (minimum is {self.config.min_post_length} characters)")
        topic_id = _int(params.get("topic_id"))
        title = params.get("title")
        if topic_id is None and (
            not isinstance(title, str) or len(title.strip()) < self.config.min_title_length
        ):
            errors.append(f"Title is too short (minimum is {self.config.min_title_length} characters)")
        if errors:
            return JSONResponse({"action": "create_post", "errors": errors}, status_code=422)
        topic: Row | None = None
        if topic_id is not None:
            topic = self.store.topic(topic_id)
            if topic is None or not self._can_see(topic, user) or topic["deleted_at"] is not None:
                return not_found()
            if topic["closed"] or topic["archived"]:
                return JSONResponse(
                    {"action": "create_post", "errors": ["This topic is closed."]}, status_code=422
                )
        held = {n.strip().lower() for n in self.faults.hold_for_review.split(",") if n.strip()}
        if user.username.lower() in held and not user.admin:
            # NewPostManager: the post waits in the review queue (staff are exempt); no post, no webhook.
            with self._log_lock:
                self.pending_posts.append({"user": user.username, "topic_id": topic_id, "raw": raw})
                pending_id, count = len(self.pending_posts), len(self.pending_posts)
            created = as_iso(datetime.now(UTC)) or ""
            return JSONResponse(pending_post_json(pending_id, raw, cook(raw), created, count))
        existing = self.store.recent_identical(user.id, topic_id, raw, self.config.identical_post_window_s)
        if existing is not None:
            post = self.store.post(existing)
            if post is not None:
                return JSONResponse(post_json(post, viewer_id=user.id))
        reply_to = _int(params.get("reply_to_post_number"))
        with self.store.connection() as conn, conn.transaction():
            new_topic = topic_id is None
            recipients: list[User] = []
            if topic_id is None:
                archetype = "private_message" if params.get("archetype") == "private_message" else "regular"
                if archetype == "private_message":
                    names = [
                        n.strip() for n in str(params.get("target_recipients") or "").split(",") if n.strip()
                    ]
                    recipients = self.store.users_by_names(conn, names)
                    if not recipients:
                        return JSONResponse(
                            {"action": "create_post", "errors": ["You must choose a valid user."]},
                            status_code=422,
                        )
                allowed = [user.id, *(r.id for r in recipients)] if archetype == "private_message" else []
                topic_id = self.store.create_topic(
                    conn,
                    user,
                    str(title).strip(),
                    slugify(str(title)),
                    _int(params.get("category")),
                    archetype,
                    allowed,
                )
                reply_to = None
            elif reply_to is not None:
                found = conn.execute(
                    "SELECT 1 FROM forum.posts WHERE topic_id = %s AND post_number = %s", (topic_id, reply_to)
                ).fetchone()
                reply_to = reply_to if found else None
            post_id = self.store.insert_post(
                conn, user, topic_id, raw, cook(raw), html_to_text(cook(raw)), reply_to
            )
            post = conn.execute(
                "SELECT p.*, t.title AS topic_title, t.slug AS topic_slug, t.category_id,"
                " t.archetype AS topic_archetype, ru.username AS reply_to_username,"
                " ru.user_id AS reply_to_user_id,"
                " (SELECT count(*) FROM forum.posts c WHERE c.topic_id = t.id) AS topic_posts_count"
                " FROM forum.posts p JOIN forum.topics t ON t.id = p.topic_id LEFT JOIN forum.posts ru"
                " ON ru.topic_id = p.topic_id AND ru.post_number = p.reply_to_post_number WHERE p.id = %s",
                (post_id,),
            ).fetchone()
            if post is None:  # pragma: no cover - just inserted
                return not_found()
            self._notify(conn, user, post, recipients if new_topic else [])
        suppress = self._suppress_quoting()
        self.webhooks.emit(
            "post_created",
            {"post": webhook_post_json(post, int(post["topic_posts_count"]), suppress_quoting=suppress)},
        )
        return JSONResponse(post_json(post, viewer_id=user.id, suppress_quoting=suppress))

    async def _own_post(self, request: Request) -> tuple[User, Row] | Response:
        """The acting user and the post they may change (author or admin), or the error to answer."""
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        post = await run_in_threadpool(self.store.post, int(request.path_params["post_id"]))
        if post is None:
            return not_found()
        if not user.admin and user.id != post["user_id"]:
            return invalid_access()
        return user, post

    def _emit(self, event: str, post_id: int) -> None:
        post = self.store.post(post_id)
        topic = self.store.topic(int(post["topic_id"])) if post else None
        if post is not None and topic is not None:
            suppress = self._suppress_quoting()
            body = webhook_post_json(post, int(topic["posts_count"]), suppress_quoting=suppress)
            self.webhooks.emit(event, {"post": body})

    async def edit_post(self, request: Request) -> Response:
        """``PUT /posts/{id}.json`` with ``{"post": {"raw": …}}``: a new version and a post_edited webhook."""
        found = await self._own_post(request)
        if isinstance(found, Response):
            return found
        user, post = found
        params = await _params(request)
        nested = params.get("post")
        raw = nested.get("raw") if isinstance(nested, dict) else params.get("post[raw]", params.get("raw"))
        if not isinstance(raw, str):
            return error(400, "param is missing or the value is empty: post", "invalid_parameters")
        if len(raw.strip()) < self.config.min_post_length:
            body = {"errors": [f"Body is too short (minimum is {self.config.min_post_length} characters)"]}
            return JSONResponse(body, status_code=422)
        if raw != post["raw"]:
            cooked = cook(raw)
            await run_in_threadpool(self.store.edit_post, int(post["id"]), raw, cooked, html_to_text(cooked))
            await run_in_threadpool(self._emit, "post_edited", int(post["id"]))
        updated = await run_in_threadpool(self.store.post, int(post["id"]))
        return JSONResponse({"post": post_json(updated or post, viewer_id=user.id)})

    async def delete_post(self, request: Request) -> Response:
        """``DELETE /posts/{id}.json``: soft delete and a post_destroyed webhook."""
        found = await self._own_post(request)
        if isinstance(found, Response):
            return found
        _, post = found
        if post["deleted_at"] is None:
            await run_in_threadpool(self.store.set_deleted, int(post["id"]), True)
            await run_in_threadpool(self._emit, "post_destroyed", int(post["id"]))
        return Response(status_code=200)

    async def recover_post(self, request: Request) -> Response:
        """``PUT /posts/{id}/recover.json``: undelete and a post_recovered webhook."""
        found = await self._own_post(request)
        if isinstance(found, Response):
            return found
        user, post = found
        if post["deleted_at"] is not None:
            await run_in_threadpool(self.store.set_deleted, int(post["id"]), False)
            await run_in_threadpool(self._emit, "post_recovered", int(post["id"]))
        updated = await run_in_threadpool(self.store.post, int(post["id"]))
        return JSONResponse(post_json(updated or post, viewer_id=user.id))

    async def delete_topic(self, request: Request) -> Response:
        """``DELETE /t/{id}.json`` (author or staff): PostDestroyer on the first post, so Discourse sends
        ``post_destroyed`` for the first post only, then ``topic_destroyed`` with the topic."""
        found = await self._own_topic(request)
        if isinstance(found, Response):
            return found
        topic, first = found
        if topic["deleted_at"] is None:
            await run_in_threadpool(self.store.set_deleted, int(first["id"]), True)
            await run_in_threadpool(self.store.set_topic_deleted, int(topic["id"]), True)
            await run_in_threadpool(self._emit, "post_destroyed", int(first["id"]))
            await run_in_threadpool(self._emit_topic, "topic_destroyed", int(topic["id"]))
        return Response(status_code=200)

    async def recover_topic(self, request: Request) -> Response:
        """``PUT /t/{id}/recover.json``: ``post_recovered`` for the first post, then ``topic_recovered``."""
        found = await self._own_topic(request)
        if isinstance(found, Response):
            return found
        topic, first = found
        if topic["deleted_at"] is not None:
            await run_in_threadpool(self.store.set_topic_deleted, int(topic["id"]), False)
            await run_in_threadpool(self.store.set_deleted, int(first["id"]), False)
            await run_in_threadpool(self._emit, "post_recovered", int(first["id"]))
            await run_in_threadpool(self._emit_topic, "topic_recovered", int(topic["id"]))
        return Response(status_code=200)

    async def _own_topic(self, request: Request) -> tuple[Row, Row] | Response:
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        topic_id = int(request.path_params["topic_id"])
        topic = await run_in_threadpool(self.store.topic, topic_id)
        first = await run_in_threadpool(self.store.post_by_number, topic_id, 1)
        if topic is None or first is None or not self._can_see(topic, user):
            return not_found()
        if not user.admin and user.id != topic["user_id"]:
            return invalid_access()
        return topic, first

    def _emit_topic(self, event: str, topic_id: int) -> None:
        topic = self.store.topic(topic_id)
        if topic is not None:
            self.webhooks.emit(event, {"topic": webhook_topic_json(topic)})

    def _notify(self, conn: Any, author: User, post: Row, recipients: list[User]) -> None:
        """Mentions (type 1), a reply to someone's post (2), a new PM (6); one per user, never the author."""
        notified: set[int] = {author.id}
        for target in recipients:
            if target.id not in notified:
                self.store.add_notification(conn, target.id, PRIVATE_MESSAGE, post, author)
                notified.add(target.id)
        for target in self.store.users_by_names(conn, mentioned_usernames(post["raw"])):
            if target.id not in notified:
                self.store.add_notification(conn, target.id, MENTIONED, post, author)
                notified.add(target.id)
        replied_to = post.get("reply_to_user_id")
        if replied_to is not None and int(replied_to) not in notified:
            self.store.add_notification(conn, int(replied_to), REPLIED, post, author)

    def _suppress_quoting(self) -> bool:
        """The site setting ``suppress_reply_when_quoting`` (default true)."""
        return self.store.setting("suppress_reply_when_quoting") != "false"

    def _can_see(self, topic: Row, user: User | None) -> bool:
        if topic["deleted_at"] is not None and not (user is not None and user.admin):
            return False  # a deleted topic is seen by staff only
        if topic["archetype"] == "private_message":
            return user is not None and (user.admin or user.id in (topic["allowed_user_ids"] or []))
        return bool(topic["visible"]) or (user is not None and user.admin)


async def _params(request: Request) -> dict[str, Any]:
    """A request's parameters, from a JSON or form body (Discourse accepts both) or the query string."""
    body = await request.body()
    params: dict[str, Any] = dict(request.query_params)
    if not body:
        return params
    if "json" in request.headers.get("content-type", ""):
        try:
            data = json.loads(body)
        except ValueError:
            return params
        if isinstance(data, dict):
            params.update(data)
        return params
    for key, values in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items():
        params[key] = values[-1]
    return params


def _int(value: object) -> int | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def create_forum_app(store: ForumStore, config: ForumConfig | None = None) -> ForumApp:
    """The local forum over ``store`` (already loaded); ``.app`` is the ASGI application."""
    return ForumApp(store, config or ForumConfig())
