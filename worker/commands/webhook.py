"""``citebot webhook serve``: the Discourse webhook receiver under uvicorn."""

from __future__ import annotations

import argparse

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
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from worker.actors import DramatiqIntake, declare_actors, enqueue_only
    from worker.broker import build_broker
    from worker.commands.common import settings_from
    from worker.webhook import create_app, redis_for_webhook

    settings = settings_from(args)
    broker = build_broker(settings.redis)
    actors = declare_actors(broker, enqueue_only, settings.limits)
    app = create_app(settings, DramatiqIntake(actors), redis_for_webhook(settings))
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_config=None)
    return 0
