"""``citebot webhook serve``: the Discourse webhook receiver under uvicorn."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from worker.settings import Settings

NAME = "webhook"
HELP = "Discourse webhook receiver: serve"


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="webhook_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "serve",
        help="serve the webhook app (POST /webhooks/discourse, /healthz, /readyz, /metrics)",
        description="Verify, filter and enqueue Discourse webhook deliveries. Point Discourse's webhook "
        "(Post Event and Topic Event, content type application/json, with the secret) at "
        "http://HOST:PORT/webhooks/discourse.",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port, each with its own Redis pool (default 1; "
        "docs/performance.md measures 1 and 2 on 2 cores)",
    )
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from worker.app.commands.common import settings_from

    settings = settings_from(args)  # checked once here, so that a bad value fails before any process starts
    if args.workers > 1:
        uvicorn.run(
            f"{__name__}:app_from_env",
            factory=True,
            workers=args.workers,
            host=args.host,
            port=args.port,
            access_log=False,
            log_config=None,
        )
        return 0
    uvicorn.run(build_app(settings), host=args.host, port=args.port, access_log=False, log_config=None)
    return 0


def build_app(settings: Settings) -> Starlette:
    """The webhook app over the real queue: its broker, actors (enqueue only) and Redis pool."""
    from worker.actors import DramatiqIntake, declare_actors, enqueue_only
    from worker.app.webhook import create_app, redis_for_webhook
    from worker.broker import build_broker

    broker = build_broker(settings.redis)
    actors = declare_actors(broker, enqueue_only, settings.limits)
    return create_app(settings, DramatiqIntake(actors), redis_for_webhook(settings))


def app_from_env() -> Starlette:
    """Each ``--workers`` process's app (uvicorn's factory): settings from the environment, as the
    parent read them."""
    from worker.app.commands.common import settings_from

    return build_app(settings_from(argparse.Namespace()))
