"""The local forum's HTTP API: the subset of Discourse the bot uses, with Discourse's shapes and errors,
each route answered as the caller's ``Guardian`` (``guardian.py``) allows.

Reads in ``reads.py``, posting in ``posting.py``, moderation (categories, topic status, moving posts,
hiding, anonymizing, admin user reads) in ``moderation.py``; here: edits, deletions, recoveries, the
admin site settings, the request plumbing. Test controls under ``/__forum/`` (``controls.py``). Auth:
``Api-Key`` (the one configured key, acting as any existing user, like an "All users" key) +
``Api-Username``; anonymous reads see what Discourse shows a visitor.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum.controls import control_routes
from eval.stack.forum.guardian import FULL, Category, Guardian, Policy
from eval.stack.forum.limits import SlidingWindowLimiter, UserApiKeys, rate_limited
from eval.stack.forum.moderation import moderation_routes
from eval.stack.forum.pages import page_routes
from eval.stack.forum.posting import create_post, webhook_body
from eval.stack.forum.reads import read_routes
from eval.stack.forum.serialize import (
    error,
    forbidden,
    invalid_access,
    not_found,
    post_json,
    reviewable_json,
    site_setting_json,
    webhook_topic_json,
)
from eval.stack.forum.store import ForumStore, Row, User
from eval.stack.forum.text import cook, html_to_text, slugify
from eval.stack.forum.webhooks import Faults, WebhookSender


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
    # Discourse's max_user_api_reqs_per_minute / _per_day: per User API key (limits.UserApiKeys).
    user_api_reqs_per_minute: int = 20
    user_api_reqs_per_day: int = 2880
    bot_admin: bool = True
    faults: Faults = field(default_factory=Faults)
    # Categories by id: (name, read_restricted), written at start-up; a category a topic names and this
    # leaves out is "Category <id>", public. A read-restricted one is seen by admins and the groups of
    # ``category_groups`` (full permission); ``category_parents`` nests them.
    categories: dict[int, tuple[str, bool]] = field(default_factory=dict)
    category_groups: dict[int, tuple[str, ...]] = field(default_factory=dict)
    category_parents: dict[int, int] = field(default_factory=dict)
    latest_posts_page: int = 50  # posts a page of ``GET /posts.json`` (Discourse: 50)
    # Site settings Guardian reads (whispers_allowed_groups, hidden_post_visible_groups) and tags of a
    # staff-only tag group (shown to staff only).
    whispers_allowed_groups: tuple[str, ...] = ("staff",)
    hidden_post_visible_groups: tuple[str, ...] = ()
    staff_only_tags: tuple[str, ...] = ()
    # lazy_load_categories_groups includes everyone: /site.json lists only the caller's sidebar
    # categories (a user's own, else these: default_navigation_menu_categories) and their ancestors.
    lazy_load_categories: bool = False
    sidebar_category_ids: tuple[int, ...] = ()
    # SiteSetting.uncategorized_category_id: a regular topic created or split off without a category
    # is filed there (Topic#ensure_topic_has_a_category, app/models/topic.rb); seeded public.
    uncategorized_category_id: int = 1

    def policy(self) -> Policy:
        return Policy(self.whispers_allowed_groups, self.hidden_post_visible_groups, self.staff_only_tags)

    def category_seeds(self) -> list[Category]:
        """The configured categories as rows."""
        out = []
        named = dict.fromkeys((*self.category_parents, *self.category_parents.values()), ("", False))
        named[self.uncategorized_category_id] = ("Uncategorized", False)
        named.update(self.categories)
        for cid, (name, restricted) in sorted(named.items()):
            groups = self.category_groups.get(cid, ())
            permissions = {g.lower(): FULL for g in groups} if restricted else {}
            slug = slugify(name) if name else f"category-{cid}"
            parent = self.category_parents.get(cid)
            label = name or f"Category {cid}"
            out.append(Category(cid, label, slug, parent, restricted, permissions, position=cid))
        return out


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
        self.user_api_keys = UserApiKeys(config.user_api_reqs_per_minute, config.user_api_reqs_per_day)
        self.calls: list[ApiCall] = []
        self.pending_posts: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()
        for name in config.admins:
            store.ensure_user(name, admin=True)
        store.seed_categories(config.category_seeds())
        api = self._api
        self.app = Starlette(
            routes=[
                *read_routes(self),
                Route("/posts.json", api(lambda r: create_post(self, r)), methods=["POST"]),
                Route("/posts/{post_id:int}.json", api(self.edit_post), methods=["PUT"]),
                Route("/posts/{post_id:int}.json", api(self.delete_post), methods=["DELETE"]),
                Route("/posts/{post_id:int}/recover.json", api(self.recover_post), methods=["PUT"]),
                Route("/t/{topic_id:int}.json", api(self.delete_topic), methods=["DELETE"]),
                Route("/t/{topic_id:int}/recover.json", api(self.recover_topic), methods=["PUT"]),
                Route("/admin/site_settings.json", api(self.site_settings), methods=["GET"]),
                Route("/admin/site_settings/{name}.json", api(self.set_site_setting), methods=["PUT"]),
                *moderation_routes(self),
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
        elif (user_key := request.headers.get("user-api-key")) is not None:
            refused = self.user_api_keys.perform(user_key)
            if refused is not None:
                return refused
        if self.faults.take("rate_limit_next"):
            return rate_limited(self.faults.retry_after_s)
        if self.faults.take_error(request.url.path):
            return Response(
                "<html><body>Bad gateway</body></html>", self.faults.error_status, media_type="text/html"
            )
        return await handler(request)

    @property
    def api_wrapper(self) -> Callable[[Handler], Handler]:
        return self._api

    async def user_of(self, request: Request) -> User | Response | None:
        return await self._user(request)

    def guardian_for(self, user: User | None) -> Guardian:
        """Discourse's ``Guardian.new(user)`` over the current categories and the configured policy."""
        return Guardian(user, self.store.categories(), self.config.policy())

    async def params(self, request: Request) -> dict[str, Any]:
        return await _params(request)

    def hold(self, username: str, topic_id: int | None, raw: str) -> tuple[int, int]:
        """Queue a post for review (``hold_for_review``): its pending id and the queue's length."""
        with self._log_lock:
            self.pending_posts.append({"user": username, "topic_id": topic_id, "raw": raw})
            return len(self.pending_posts), len(self.pending_posts)

    def emit_post(self, event: str, post_id: int) -> None:
        """A Post Event (``WebHook.enqueue_post_hooks``) with the post as it is now."""
        body = webhook_body(self, post_id)
        if body is not None:
            self.webhooks.emit(event, body)

    def emit_topic(self, event: str, topic_id: int) -> None:
        """A Topic Event (``WebHook.enqueue_topic_hooks``): ``{"topic": WebHookTopicViewSerializer}``."""
        topic = self.store.topic(topic_id)
        if topic is not None:
            self.webhooks.emit(event, {"topic": webhook_topic_json(topic)})

    def emit_reviewable(self, event: str, reviewable_id: int) -> None:
        """A Reviewable Event: ``{"reviewable": ReviewableFlaggedPostSerializer}``."""
        with self.store.connection() as conn:
            row = conn.execute("SELECT * FROM forum.reviewables WHERE id = %s", (reviewable_id,)).fetchone()
        post = self.store.post(int(row["post_id"])) if row else None
        if row is not None and post is not None:
            body = reviewable_json(
                row,
                base_url=self.config.base_url,
                topic_slug=post["topic_slug"],
                post_number=post["post_number"],
            )
            self.webhooks.emit(event, {"reviewable": body})

    def suppress_quoting(self) -> bool:
        """The site setting ``suppress_reply_when_quoting`` (default true)."""
        return self.store.setting("suppress_reply_when_quoting") != "false"

    async def _user(self, request: Request) -> User | Response | None:
        """The acting user: None when anonymous, a 403 response when the key or username is wrong. An
        ``Api-Key`` acts as its ``Api-Username``; a member's ``User-Api-Key`` acts as that member only
        (a suspended one is refused, as ``DefaultCurrentUserProvider#current_user`` does)."""
        key = request.headers.get("api-key")
        if key is None:
            user_key = request.headers.get("user-api-key")
            if user_key is None:
                return None
            name = self.user_api_keys.username(user_key)
            member = None if name is None else await run_in_threadpool(self.store.user, name)
            if member is None or member.suspended():
                return invalid_access()
            return member
        if key not in (self.config.api_key, self.config.session_key):
            return invalid_access()
        username = request.headers.get("api-username") or "system"
        user = await run_in_threadpool(self.store.user, username)
        return user if user is not None else invalid_access()

    # -- admin -----------------------------------------------------------------------------------

    async def _admin_route(self, request: Request) -> Response | None:
        """Discourse routes ``/admin/site_settings`` under ``StaffConstraint`` and ``AdminConstraint``
        (config/routes.rb). Both rescue ``Discourse::InvalidAccess`` (what a wrong ``Api-Key`` raises in
        Auth::DefaultCurrentUserProvider#current_user) and answer false, as they do for a user who is not
        an admin (lib/admin_constraint.rb, lib/staff_constraint.rb): no route matches, so the answer is
        404, not 403. None when the caller is an admin."""
        user = await self._user(request)
        if isinstance(user, Response) or user is None or not user.admin:
            return not_found()
        return None

    async def site_settings(self, request: Request) -> Response:
        refused = await self._admin_route(request)
        if refused is not None:
            return refused
        # Admin::SiteSettingsController#index permits `categories` and `plugin` only.
        categories = [c for c in (request.query_params.get("categories") or "").split(",") if c]
        plugin = request.query_params.get("plugin") or None
        rows = await run_in_threadpool(lambda: self.store.site_settings(plugin=plugin, categories=categories))
        return JSONResponse({"site_settings": [site_setting_json(r) for r in rows], "diags": {}})

    async def set_site_setting(self, request: Request) -> Response:
        refused = await self._admin_route(request)
        if refused is not None:
            return refused
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

    async def _own_post(self, request: Request, *, editing: bool = False) -> tuple[Guardian, Row] | Response:
        """The acting user's Guardian and the post they may change, or the error to answer: editing needs
        ``can_edit_post?`` (staff, or the author while the topic is not archived), deleting and recovering
        the author or staff. 404 for a post that is missing, or deleted to a non-staff user."""
        user = await self._user(request)
        if isinstance(user, Response):
            return user
        if user is None:
            return invalid_access()
        guardian = await run_in_threadpool(self.guardian_for, user)
        post = await run_in_threadpool(self.store.post, int(request.path_params["post_id"]))
        topic = await run_in_threadpool(self.store.topic, int(post["topic_id"])) if post else None
        if post is None or topic is None or (post["deleted_at"] is not None and not guardian.is_staff):
            return not_found()
        allowed = (
            guardian.can_edit_post(post, topic)
            if editing
            else guardian.is_staff or user.id == post["user_id"]
        )
        if not allowed:
            return forbidden()
        return guardian, post

    def _emit(self, event: str, post_id: int) -> None:
        self.emit_post(event, post_id)

    async def edit_post(self, request: Request) -> Response:
        """``PUT /posts/{id}.json`` with ``{"post": {"raw": …}}``: a new version and a post_edited webhook."""
        found = await self._own_post(request, editing=True)
        if isinstance(found, Response):
            return found
        guardian, post = found
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
        return JSONResponse({"post": post_json(updated or post, guardian=guardian)})

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
        guardian, post = found
        if post["deleted_at"] is not None:
            await run_in_threadpool(self.store.set_deleted, int(post["id"]), False)
            await run_in_threadpool(self._emit, "post_recovered", int(post["id"]))
        updated = await run_in_threadpool(self.store.post, int(post["id"]))
        return JSONResponse(post_json(updated or post, guardian=guardian))

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
        guardian = await run_in_threadpool(self.guardian_for, user)
        topic = await run_in_threadpool(self.store.topic, topic_id)
        first = await run_in_threadpool(self.store.post_by_number, topic_id, 1)
        if topic is None or first is None or not guardian.can_see_topic(topic, hide_deleted=False):
            return not_found()
        if not guardian.is_staff and user.id != topic["user_id"]:
            return forbidden()
        return topic, first

    def _emit_topic(self, event: str, topic_id: int) -> None:
        self.emit_topic(event, topic_id)


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
        params[key] = values if key.endswith("[]") else values[-1]
    return params


def create_forum_app(store: ForumStore, config: ForumConfig | None = None) -> ForumApp:
    """The local forum over ``store`` (already loaded); ``.app`` is the ASGI application."""
    return ForumApp(store, config or ForumConfig())
