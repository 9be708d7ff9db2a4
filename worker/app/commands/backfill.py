"""``citebot backfill``: fill the post index from a Discourse replica, the REST API or an export.

This module parses and checks the command line; the run itself is ``backfill.command.run`` (loaded only
when the command runs: the CLI's other commands do not pay for the backfill's imports).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from worker.app.commands.common import preflight, settings_from, stoppable
from worker.settings import Settings

NAME = "backfill"
HELP = "fill or refresh the post index (incremental and resumable; --bulk to load; see docs/backfill.md)"


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument("--source", choices=("db", "api", "file"), help="where posts come from (required)")
    group.add_argument("--path", type=Path, help="export folder with topics/<id>.json (--source file)")
    group.add_argument(
        "--database-url-source", metavar="URL", help="read-only Discourse PostgreSQL replica (--source db)"
    )
    group.add_argument(
        "--public-export",
        action="store_true",
        help="the export was taken as an anonymous reader: record the categories its topics carry (and "
        "its categories.json does not describe) as public, so that their posts may be cited (--source file)",
    )
    group.add_argument(
        "--reindex",
        action="store_true",
        help="empty the index and rebuild it with the configured model and dimension",
    )
    group.add_argument(
        "--bulk",
        action="store_true",
        help="a bulk load: drop the vector index, load, build it at the end (runs alone; recall scans "
        "the table meanwhile; if stopped, the next run builds the index). Without it a run writes into "
        "the live index in place",
    )
    group.add_argument(
        "--full",
        action="store_true",
        help="--source api: walk the whole forum again (in place; unchanged posts cost no embedding), "
        "not only the posts created since the last walk",
    )
    group.add_argument(
        "--build-index",
        action="store_true",
        help="only build the vector index if it is missing or invalid (what every run does first)",
    )
    group.add_argument(
        "--prune",
        action="store_true",
        help="also remove indexed posts other sources wrote that this source no longer has",
    )
    group.add_argument(
        "--excerpts",
        action="store_true",
        help="only fill the second bi-encoder's excerpt column (CITEBOT_EXCERPT_EMBEDDINGS__*) from the "
        "index; without it the column is filled after the post pass when that model is configured",
    )
    group.add_argument(
        "--reindex-excerpts",
        action="store_true",
        help="empty the excerpt column first (after changing CITEBOT_EXCERPT_EMBEDDINGS__MODEL)",
    )
    group.add_argument("--limit", type=int, metavar="N", help="stop after N posts (resumable)")
    group.add_argument("--page-size", type=int, default=1000, metavar="N", help="posts per commit")
    group.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    group.add_argument(
        "--progress", choices=("auto", "bar", "log"), default="auto", help="progress bar or log lines"
    )
    group.add_argument(
        "--enqueue",
        action="store_true",
        help="send the run to the workers (actor backfill_tick) instead of running it here; for cron",
    )
    group.set_defaults(handler=_backfill)


def _backfill(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.limit is not None and args.limit < 1:
        print("citebot: --limit must be at least 1", file=sys.stderr)
        return 2
    if args.source is None and not (args.excerpts or args.build_index):
        print("citebot: --source is required (or --excerpts or --build-index alone)", file=sys.stderr)
        return 2
    if args.full and args.source != "api":
        print("citebot: --full walks the forum's API again: use it with --source api", file=sys.stderr)
        return 2
    if (args.excerpts or args.reindex_excerpts) and not settings.excerpt_embeddings.enabled:
        print("citebot: --excerpts needs CITEBOT_EXCERPT_EMBEDDINGS__MODEL", file=sys.stderr)
        return 2
    if args.enqueue:
        return _enqueue(settings, args)
    preflight(settings, index=not (args.reindex or args.build_index))
    from backfill.command import run

    # A stopped job (Ctrl-C, or SIGTERM from an orchestrator) saves its finished pages and checkpoint.
    return stoppable(run, settings, args)


def _enqueue(settings: Settings, args: argparse.Namespace) -> int:
    """Send one ``backfill_tick`` message; a worker runs it (one per source at a time: advisory lock)."""
    from worker.actors import declare_actors, enqueue_only
    from worker.broker import build_broker

    if args.reindex or args.bulk or args.full or args.limit is not None or args.public_export:
        print(
            "citebot: --enqueue runs a plain incremental backfill "
            "(no --reindex, --bulk, --full, --limit or --public-export)",
            file=sys.stderr,
        )
        return 2

    broker = build_broker(settings.redis)
    try:
        actors = declare_actors(broker, enqueue_only, settings.limits)
        path = str(args.path.resolve()) if args.path else None
        actors.backfill_tick.send(args.source, path, args.database_url_source)
    finally:
        broker.close()
    print(f"enqueued a backfill of source {args.source!r}")
    return 0
