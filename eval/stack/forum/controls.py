"""Test controls of the local forum under ``/__forum/`` (all need the API key): fault knobs, members,
the webhook delivery log and manual redelivery."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eval.stack.forum.limits import SlidingWindowLimiter
from eval.stack.forum.serialize import error, invalid_access

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp


def _denied(forum: ForumApp, request: Request) -> Response | None:
    key = request.headers.get("api-key")
    return None if key in (forum.config.api_key, forum.config.session_key) else invalid_access()


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
        try:
            body = await request.json()
        except ValueError:
            body = None
        name = body.get("username") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name.strip() or "@" in name:
            return error(400, "username is required", "invalid_parameters")
        admin = bool(body.get("admin", False)) if isinstance(body, dict) else False
        user = await run_in_threadpool(lambda: forum.store.ensure_user(name.strip(), admin=admin))
        return JSONResponse({"id": user.id, "username": user.username, "admin": user.admin})

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
        Route("/__forum/webhooks", webhook_log, methods=["GET"]),
        Route("/__forum/webhooks/{event_id:int}/redeliver", redeliver, methods=["POST"]),
    ]
