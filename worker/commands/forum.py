"""``citebot forum serve``: the local forum server (a test double of Discourse) for demos and tests.

The CLI is the composition root: ``eval.stack.forum`` is imported inside the handler only.
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
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    import psycopg
    import psycopg_pool
    import uvicorn

    from eval.stack.forum.app import ForumConfig, create_forum_app
    from eval.stack.forum.loader import load_export
    from eval.stack.forum.store import ForumStore
    from worker.commands.common import settings_from
    from worker.errors import ConfigError, ServiceUnavailableError

    settings = settings_from(args)
    export = args.export.resolve()
    if not (export / "topics").is_dir():
        raise ConfigError(f"--export {export}: no topics/ folder (not a forum export)")
    try:
        store = ForumStore(args.database_url or settings.database.url)
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        raise ServiceUnavailableError(f"cannot reach the forum database: {exc}", service="postgres") from exc
    try:
        store.init_schema()
        meta = store.meta()
        if args.reload or meta is None or meta["export"] != str(export):
            report = load_export(store, export)
            print(f"loaded {report.topics} topics, {report.posts} posts in {report.seconds:.1f}s", flush=True)
        config = ForumConfig(
            api_key=args.api_key or settings.discourse.api_key.get_secret_value() or "local-forum-key",
            base_url=f"http://{args.host}:{args.port}",
            bot_username=settings.discourse.bot_username,
            webhook_url=args.webhook_url,
            webhook_secret=args.webhook_secret
            if args.webhook_secret is not None
            else settings.discourse.webhook_secret.get_secret_value(),
        )
        forum = create_forum_app(store, config)
        try:
            uvicorn.run(forum.app, host=args.host, port=args.port, access_log=False, log_config=None)
        finally:
            forum.close()
    finally:
        store.close()
    return 0
