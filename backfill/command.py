"""The run behind ``citebot backfill`` (``worker/app/commands/backfill.py`` parses, checks and calls it):
one backfill built from settings, its summary printed."""

from __future__ import annotations

import argparse
import json
import sys

from backfill.compose import run_configured, run_excerpts
from backfill.run import BackfillInterrupted, Summary
from worker.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run the backfill the arguments describe; 130 when it was interrupted (its pages are saved)."""
    if getattr(args, "build_index", False):
        return _build_index(settings)
    if getattr(args, "excerpts", False):
        return _excerpts(settings, args)
    stopped: Summary | None = None
    try:
        summary = run_configured(
            settings,
            args.source,
            path=args.path,
            source_url=args.database_url_source,
            reindex=args.reindex,
            prune=args.prune,
            bulk=getattr(args, "bulk", False),
            full=getattr(args, "full", False),
            public_export=getattr(args, "public_export", False),
            limit=args.limit,
            page_size=args.page_size,
            progress={"auto": None, "bar": True, "log": False}[args.progress],
        )
    except BackfillInterrupted as exc:
        summary = stopped = exc.summary
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        print(summary.line())
    if stopped is not None:
        print(
            "citebot: interrupted; the finished pages and the checkpoint are saved: "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    if settings.excerpt_embeddings.enabled:
        return _excerpts(settings, args)
    return 0


def _build_index(settings: Settings) -> int:
    """``--build-index``: the vector index built when missing or invalid (refused while a bulk load,
    which builds it itself, holds the lock)."""
    from backfill.run import ensure_index

    seconds = ensure_index(settings.database)
    print(f"vector index built in {seconds:.1f} s" if seconds else "vector index is valid: nothing to do")
    return 0


def _excerpts(settings: Settings, args: argparse.Namespace) -> int:
    """The second bi-encoder's pass over the index (``backfill/excerpts.py``)."""
    try:
        summary = run_excerpts(
            settings,
            reset=getattr(args, "reindex_excerpts", False),
            limit=args.limit,
            progress={"auto": None, "bar": True, "log": False}[args.progress],
        )
    except KeyboardInterrupt:
        print(
            "citebot: interrupted; the finished excerpt pages are saved: run again to resume", file=sys.stderr
        )
        return 130
    print(json.dumps(summary.as_dict()) if args.json else summary.line())
    return 0
