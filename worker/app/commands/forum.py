"""``citebot forum serve``: the local forum server (a test double of Discourse) for demos and tests.

The double lives in ``eval.stack.forum``; this module parses the command line, loads the settings and
hands both to ``eval.stack.forum.serve`` (loaded only when the command runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "forum"
HELP = "local forum server (a Discourse test double): serve"


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="forum_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "serve",
        help="load a forum export into Postgres (schema `forum`) and serve Discourse's API subset",
        description="Serve /t/{id}.json, /posts/{id}.json, /search.json, POST /posts.json, admin site "
        "settings and /notifications.json from a forum export, and send signed webhooks to --webhook-url.",
    )
    p.add_argument("--export", type=Path, required=True, help="export folder (topics/*.json, raw/*.md)")
    p.add_argument(
        "--also-export",
        type=Path,
        action="append",
        metavar="PATH",
        help="another export whose topics the first lacks are served too (repeatable)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=4200, help="port (default 4200)")
    p.add_argument("--database-url", default=None, help="PostgreSQL URL (default: CITEBOT_DATABASE__URL)")
    p.add_argument(
        "--api-key", default=None, help="API key (default: CITEBOT_DISCOURSE__API_KEY or a fixed dev key)"
    )
    p.add_argument("--webhook-url", default=None, help="where to POST signed webhooks (none by default)")
    p.add_argument(
        "--webhook-secret", default=None, help="webhook secret (default: CITEBOT_DISCOURSE__WEBHOOK_SECRET)"
    )
    p.add_argument("--reload", action="store_true", help="reload the export even if it is already loaded")
    p.add_argument(
        "--admin-api-reqs-per-minute",
        type=int,
        default=60,
        metavar="N",
        help="Discourse's max_admin_api_reqs_per_minute: one limit for every API-key request (default 60)",
    )
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from eval.stack.forum.serve import serve
    from worker.app.commands.common import settings_from

    return serve(args, settings_from(args))
