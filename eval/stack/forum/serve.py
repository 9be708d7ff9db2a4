"""``citebot forum serve``: load a forum export into PostgreSQL and serve the Discourse double over it.
The command line is parsed, and the settings loaded, by ``worker.app.commands.forum``."""

from __future__ import annotations

import argparse
import os

import psycopg
import psycopg_pool
import uvicorn

from eval.stack.forum.app import ForumConfig, create_forum_app
from eval.stack.forum.loader import export_label, load_export
from eval.stack.forum.store import ForumStore
from worker.errors import ConfigError, ServiceUnavailableError
from worker.settings import Settings


def serve(args: argparse.Namespace, settings: Settings) -> int:
    """The handler of ``citebot forum serve`` (arguments parsed by ``worker.app.commands.forum``)."""
    export = args.export.resolve()
    also = [p.resolve() for p in args.also_export or ()]
    for folder in (export, *also):
        if not (folder / "topics").is_dir():
            raise ConfigError(f"--export {folder}: no topics/ folder (not a forum export)")
    try:
        store = ForumStore(args.database_url or settings.database.url)
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        raise ServiceUnavailableError(f"cannot reach the forum database: {exc}", service="postgres") from exc
    try:
        store.init_schema()
        meta = store.meta()
        if args.reload or meta is None or meta["export"] != export_label(export, also):
            report = load_export(store, export, also=also)
            print(f"loaded {report.topics} topics, {report.posts} posts in {report.seconds:.1f}s", flush=True)
        config = ForumConfig(
            api_key=args.api_key or settings.discourse.api_key.get_secret_value() or "local-forum-key",
            base_url=f"http://{args.host}:{args.port}",
            bot_username=settings.discourse.bot_username,
            webhook_url=args.webhook_url,
            webhook_secret=args.webhook_secret
            if args.webhook_secret is not None
            else settings.discourse.webhook_secret.get_secret_value(),
            admin_api_reqs_per_minute=args.admin_api_reqs_per_minute,
            # Members' browser sessions in the demo and the soak (not counted as API requests).
            session_key=os.environ.get("LOCAL_FORUM_SESSION_KEY") or "local-forum-session",
        )
        forum = create_forum_app(store, config)
        try:
            uvicorn.run(forum.app, host=args.host, port=args.port, access_log=False, log_config=None)
        finally:
            forum.close()
    finally:
        store.close()
    return 0
