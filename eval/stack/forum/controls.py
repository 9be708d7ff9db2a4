"""Test controls of the local forum under ``/__forum/`` (all need the API key): fault knobs, members
(with their trust level, roles, groups, silencing, suspension, staging), flag-hiding a post and deciding
its reviewable, the webhook delivery log and manual redelivery."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum import actions
from eval.stack.forum.limits import SlidingWindowLimiter
from eval.stack.forum.serialize import error, invalid_access
from eval.stack.forum.store import User

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp


def _denied(forum: ForumApp, request: Request) -> Response | None:
    key = request.headers.get("api-key")
    return None if key in (forum.config.api_key, forum.config.session_key) else invalid_access()


FOREVER = datetime(3000, 1, 1, tzinfo=UTC)  # UserSilencer / suspension "forever": a date far ahead


def _until(value: Any) -> datetime | None:
    """``true`` → forever, ``false``/None → not, an ISO timestamp → until then."""
    if value is None or value is False:
        return None
    if value is True:
        return FOREVER
    parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _user_values(body: dict[str, Any]) -> dict[str, Any]:
    """The member fields of ``POST /__forum/users`` that the body sets, as columns."""
    values: dict[str, Any] = {}
    for key in ("admin", "moderator", "staged"):
        if key in body:
            values[key] = bool(body[key])
    if "trust_level" in body:
        level = int(body["trust_level"])
        if not 0 <= level <= 4:
            raise ValueError("trust_level must be 0..4")
        values["trust_level"] = level
    if "groups" in body:
        values["groups"] = [str(g).lower() for g in body["groups"] or []]
    for key, column in (("silenced", "silenced_till"), ("suspended", "suspended_till")):
        for given in (key, column):
            if given in body:
                values[column] = _until(body[given])
    if "sidebar_category_ids" in body:
        ids = body["sidebar_category_ids"]
        values["sidebar_category_ids"] = None if ids is None else [int(i) for i in ids]
    return values


def control_routes(forum: ForumApp) -> list[Route]:
    """The ``/__forum/`` routes bound to ``forum``."""

    async def set_faults(request: Request) -> Response:
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        if request.method == "POST":
            try:
                forum.faults.update(await request.json())
            except (ValueError, TypeError) as exc:
                return error(400, str(exc), "invalid_parameters")
        return JSONResponse(forum.faults.as_dict())

    async def add_user(request: Request) -> Response:
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        body, name = await _username_body(request)
        if name is None or "@" in name:
            return error(400, "username is required", "invalid_parameters")
        try:
            values = _user_values(body)
        except (TypeError, ValueError) as exc:
            return error(400, str(exc), "invalid_parameters")

        def upsert() -> User:
            user = forum.store.ensure_user(name, admin=bool(body.get("admin", False)))
            return forum.store.update_user(user.id, values)

        user = await run_in_threadpool(upsert)
        return JSONResponse(
            {
                "id": user.id,
                "username": user.username,
                "admin": user.admin,
                "moderator": user.moderator,
                "trust_level": user.trust_level,
                "groups": list(user.groups),
                "silenced": user.silenced(),
                "suspended": user.suspended(),
                "staged": user.staged,
            }
        )

    async def mint_user_api_key(request: Request) -> Response:
        """A User API key for an existing member (in Discourse the member grants it through
        ``/user-api-key/new``): ``{"username"}`` → ``{"username", "key"}``; 404 for an unknown member."""
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        _, name = await _username_body(request)
        if name is None:
            return error(400, "username is required", "invalid_parameters")
        user = await run_in_threadpool(forum.store.user, name)
        if user is None:
            return error(404, f"no member {name}: add it with POST /__forum/users", "not_found")
        return JSONResponse({"username": user.username, "key": forum.user_api_keys.mint(user.username)})

    async def hide_post(request: Request) -> Response:
        """A flag that hides the post (``PostActionCreator`` reaching the threshold): the reviewable events
        and ``Post#hide!``; ``{"flagger": username}`` (default ``system``). Answers the reviewable id."""
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        try:
            body = await request.json()
        except ValueError:
            body = {}
        flagger_name = (body or {}).get("flagger") or "system"
        flagger = await run_in_threadpool(forum.store.user, str(flagger_name))
        if flagger is None:
            return error(400, f"no user {flagger_name}", "invalid_parameters")
        try:
            reviewable_id, events = await run_in_threadpool(
                actions.hide_post, forum, int(request.path_params["post_id"]), flagger
            )
        except LookupError:
            return error(404, "post not found", "not_found")
        await run_in_threadpool(events.send, forum)
        return JSONResponse({"reviewable_id": reviewable_id})

    async def perform_reviewable(request: Request) -> Response:
        """A moderator's decision on a flagged post: ``agree`` (approved, stays hidden) or ``disagree``
        (rejected, unhidden); sends ``reviewable_transitioned_to``."""
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        action = str(request.path_params["action"])
        if action not in ("agree", "disagree"):
            return error(400, "action must be agree or disagree", "invalid_parameters")
        try:
            events = await run_in_threadpool(
                actions.perform_reviewable, forum, int(request.path_params["reviewable_id"]), action
            )
        except LookupError:
            return error(404, "reviewable not found", "not_found")
        await run_in_threadpool(events.send, forum)
        return JSONResponse({"success": "OK"})

    async def webhook_log(request: Request) -> Response:
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        return JSONResponse(
            [
                {"event_id": d.event_id, "event": d.event, "status": d.status, "attempts": d.attempts}
                for d in forum.webhooks.deliveries
            ]
        )

    async def redeliver(request: Request) -> Response:
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        found = forum.webhooks.redeliver(int(request.path_params["event_id"]))
        return JSONResponse({"queued": found is not None}, status_code=200 if found else 404)

    async def api_log(request: Request) -> Response:
        """The admin-API limiter and the log of API requests after ``?since=`` (monotonic seconds);
        POST ``{"admin_api_reqs_per_minute": N}`` sets a new limit (a fresh window)."""
        denied = _denied(forum, request)
        if denied is not None:
            return denied
        if request.method == "POST":
            try:
                limit = int((await request.json())["admin_api_reqs_per_minute"])
            except (ValueError, TypeError, KeyError) as exc:
                return error(400, f"admin_api_reqs_per_minute: {exc}", "invalid_parameters")
            forum.api_limiter = SlidingWindowLimiter(limit, forum.config.admin_api_window_s)
        since = float(request.query_params.get("since") or 0)
        lim = forum.api_limiter
        calls = [[c.at, c.keyed, c.status, c.method, c.path] for c in list(forum.calls) if c.at >= since]
        return JSONResponse(
            {
                "limit": lim.limit,
                "window_s": lim.window_s,
                "performed": lim.performed,
                "refused": lim.refused,
                "now": time.monotonic(),
                "calls": calls,
            }
        )

    return [
        Route("/__forum/faults", set_faults, methods=["GET", "POST"]),
        Route("/__forum/api", api_log, methods=["GET", "POST"]),
        Route("/__forum/users", add_user, methods=["POST"]),
        Route("/__forum/user-api-keys", mint_user_api_key, methods=["POST"]),
        Route("/__forum/posts/{post_id:int}/hide", hide_post, methods=["POST"]),
        Route("/__forum/reviewables/{reviewable_id:int}/{action}", perform_reviewable, methods=["POST"]),
        Route("/__forum/webhooks", webhook_log, methods=["GET"]),
        Route("/__forum/webhooks/{event_id:int}/redeliver", redeliver, methods=["POST"]),
    ]


async def _username_body(request: Request) -> tuple[dict[str, Any], str | None]:
    """The request's JSON object and its non-blank ``username`` (stripped; None when missing)."""
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return {}, None
    name = body.get("username")
    return body, name.strip() if isinstance(name, str) and name.strip() else None
