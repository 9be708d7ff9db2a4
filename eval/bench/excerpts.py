"""``python -m eval.bench excerpts [--n 300] [--model ID]``: the backfill cost of the excerpt column.

The eligible posts among the first ``--n`` of a forum export (default: the Urho3D archive) are written into
``post_index`` of a fresh database of its own embedded PostgreSQL (``.cache/pg-bench-excerpts``) by
the backfill with a null embedder (no model: the post pass is not what is measured), then the second
bi-encoder's pass (``backfill.excerpts.fill_excerpts``: excerpt, hash, embed, upsert) runs over them
with the real model, timed: excerpts/s and ms per excerpt, then a second pass, which must embed
nothing. Default model: all-mpnet-base-v2 (``make mpnet``), on this process's CPUs.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from backfill.excerpts import fill_excerpts
from backfill.run import BackfillOptions, run_backfill
from backfill.sources.file import FileSource
from eval.bench.report import emit, print_table
from eval.stack.postgres import EmbeddedPostgres, ensure_database
from worker.clients.embeddings import build_excerpt_embedder
from worker.db.migrate import migrate
from worker.settings import Settings
from worker.testing.models import FakeEmbedder

ROOT = Path(__file__).resolve().parents[2]
DATABASE = "citebot_bench_excerpts"
URHO3D = ROOT.parent / "shared" / "data" / "urho3d"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.bench excerpts", description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="posts read from the export (eligible: embedded)")
    parser.add_argument("--forum", type=Path, default=URHO3D, help="forum export folder")
    parser.add_argument("--model", default="sentence-transformers/all-mpnet-base-v2", help="second model")
    parser.add_argument("--dimension", type=int, default=768, help="its dimension")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per embedding call")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    server = EmbeddedPostgres(ROOT / ".cache" / "pg-bench-excerpts")
    admin = server.start()
    try:
        url = ensure_database(admin, DATABASE, fresh=True)
        settings = Settings.model_validate(
            {
                "database": {"url": url},
                "embeddings": {"model": "null", "dimension": 8},
                "excerpt_embeddings": {
                    "provider": "local",
                    "model": args.model,
                    "dimension": args.dimension,
                    "max_tokens": 384,
                    "batch_size": args.batch_size,
                },
            }
        )
        migrate(settings)
        posts = run_backfill(
            settings.database,
            FileSource(args.forum),
            FakeEmbedder(model="null", dimension=8, fixed=True),
            BackfillOptions(limit=args.n, progress=False, build_index=False),
        )
        model = build_excerpt_embedder(settings, None)
        if model is None:
            raise SystemExit("no second model")
        model.embed(["warm up"], kind="passage")
        first = fill_excerpts(settings.database, model, batch_size=args.batch_size)
        again = fill_excerpts(settings.database, model, batch_size=args.batch_size)
    finally:
        server.stop()
    rate = first.embedded / first.duration_s if first.duration_s else 0.0
    print_table(
        ["pass", "embedded", "skipped", "seconds", "excerpts/s"],
        [
            ["first", first.embedded, first.skipped, first.duration_s, rate],
            ["again", again.embedded, again.skipped, again.duration_s, 0.0],
        ],
    )
    emit(
        "excerpts",
        {
            "model": args.model,
            "posts_indexed": posts.embedded,
            "embedded": first.embedded,
            "seconds": first.duration_s,
            "excerpts_per_s": round(rate, 2),
            "ms_per_excerpt": round(1000 * first.duration_s / max(1, first.embedded), 1),
            "second_pass_embedded": again.embedded,
            "second_pass_s": again.duration_s,
            "load_average": round(os.getloadavg()[0], 2),
            "cpus": os.cpu_count(),
        },
    )
    return 0
