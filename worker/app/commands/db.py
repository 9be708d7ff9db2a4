"""``citebot db migrate`` and ``citebot db status``."""

from __future__ import annotations

import argparse

from worker.app.commands.common import settings_from
from worker.db.connect import connect
from worker.db.meta import read_index_meta
from worker.db.migrate import migrate, pending
from worker.db.vector_index import index_state, read_kind, read_memory

NAME = "db"
HELP = "database schema: migrate, status"


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="db_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser(
        "migrate",
        help="apply pending schema migrations (idempotent, safe to run concurrently)",
        description="Apply pending SQL migrations in order, each in a transaction, under an advisory "
        "lock. The embedding dimension (CITEBOT_EMBEDDINGS__DIMENSION) and model are fixed here.",
    )
    p.set_defaults(handler=_migrate)
    s = sub.add_parser("status", help="show applied migrations and the index's model and size")
    s.set_defaults(handler=_status)


def _migrate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    report = migrate(settings)
    if report.applied:
        print(f"applied: {', '.join(report.applied)}")
    else:
        print("schema is up to date")
    print(f"index: {report.meta_model} ({report.meta_dimension}-d)")
    if not report.meta_matches:
        print(
            f"warning: configured {settings.embeddings.model} ({settings.embeddings.dimension}-d) differs; "
            "run `citebot backfill --reindex`"
        )
    return 0


def _status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with connect(settings.database) as conn:
        todo = pending(conn, settings.embeddings.dimension)
        if todo:
            print(f"pending migrations: {', '.join(todo)}")
            return 1
        meta = read_index_meta(conn)
        row = conn.execute("SELECT count(*) FROM post_index").fetchone()
        posts = int(row[0]) if row else 0
        memory = read_memory(conn, read_kind(conn))
        state = index_state(conn)
    print(f"schema up to date; index: {meta.model} ({meta.dimension}-d, {meta.strategy}), {posts} posts")
    print(
        f"vector index {memory.index}: {state}, {memory.index_bytes / 2**20:.1f} MiB; shared_buffers "
        f"{memory.shared_buffers_bytes / 2**20:.0f} MiB; huge pages {memory.huge_pages}"
    )
    for advice in memory.advice():
        print(f"warning: {advice} (docs/operations.md, 'Sizing the index')")
    if state != "valid":
        # Missing: a bulk load dropped it (running, or stopped before its end); invalid: a failed build.
        print(
            f"warning: the vector index is {state}: recall scans the whole table. A running bulk load "
            "builds it when it ends; otherwise the next backfill run builds it, or now: "
            "citebot backfill --build-index"
        )
        return 1
    return 0
