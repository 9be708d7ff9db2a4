"""``citebot calibrate``: fit the second stage's weights and zone thresholds to this forum's solved topics.

The run is ``backfill.calibrate.run`` (it reads the forum through the backfill's sources), loaded only
when the command runs; ``--report`` reads the database only. See docs/calibrate.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worker.app.commands.common import preflight, settings_from, stoppable
from worker.calibration.run import FLOOR_SOLVED_TOPICS, MIN_SOLVED_TOPICS

NAME = "calibrate"
HELP = (
    "fit the second stage's weights and zone thresholds to the forum's solved topics "
    "(--report: what is in use; see docs/calibrate.md)"
)


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument(
        "--source",
        choices=("db", "api", "file"),
        help="where the solved topics come from (as the backfill's)",
    )
    group.add_argument("--path", type=Path, help="export folder with topics/<id>.json (--source file)")
    group.add_argument(
        "--database-url-source", metavar="URL", help="read-only Discourse PostgreSQL replica (--source db)"
    )
    group.add_argument(
        "--report", action="store_true", help="show the weights in use and the latest runs; fit nothing"
    )
    group.add_argument(
        "--force",
        action="store_true",
        help="use the new fit even when the weights in use did better on the test half",
    )
    group.add_argument(
        "--min-topics",
        type=int,
        default=MIN_SOLVED_TOPICS,
        metavar="N",
        help=f"solved topics needed to fit (default {MIN_SOLVED_TOPICS}, at least {FLOOR_SOLVED_TOPICS}); "
        "below it the shipped weights stay",
    )
    group.add_argument(
        "--if-new",
        type=int,
        metavar="N",
        help="fit only when the model set's last run counted at least N fewer solved topics (the nightly "
        "job); otherwise record nothing and exit 0",
    )
    group.add_argument(
        "--out", type=Path, metavar="FILE", help="also write the whole result (JSON, per question)"
    )
    group.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    group.add_argument(
        "--restart",
        action="store_true",
        help="read the forum and ask every question again (by default a stopped run's saved read and "
        "questions are reused)",
    )
    group.add_argument(
        "--progress", choices=("auto", "bar", "log"), default="auto", help="progress bar or log lines"
    )
    group.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="S",
        help="without a bar: one progress line every S seconds (default 30)",
    )
    group.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.report:
        preflight(settings, index=False)
        return report(settings, as_json=args.json)
    if args.source is None:
        print("citebot: --source is required (or --report)", file=sys.stderr)
        return 2
    if args.if_new is not None and args.if_new < 1:
        print("citebot: --if-new must be at least 1", file=sys.stderr)
        return 2
    if args.min_topics < FLOOR_SOLVED_TOPICS:
        print(f"citebot: --min-topics must be at least {FLOOR_SOLVED_TOPICS}", file=sys.stderr)
        return 2
    preflight(settings)
    from backfill.calibrate import run

    return stoppable(run, settings, args)


def report(settings: Any, *, as_json: bool = False) -> int:
    """What the worker uses for the configured model set, and the latest runs."""
    from worker.calibration import store
    from worker.db.connect import connect
    from worker.retrieval.stage import model_set_id

    second = settings.excerpt_embeddings.model if settings.excerpt_embeddings.enabled else None
    sets = [model_set_id(settings.embeddings.model)]
    if second:
        sets.append(model_set_id(settings.embeddings.model, second))
    conn = connect(settings.database, autocommit=True)
    try:
        sets += store.cross_encoder_sets(conn, sets)  # fitted with a cross-encoder's logit
        rows = {m: (store.active(conn, m), store.history(conn, m, limit=5)) for m in sets}
    finally:
        conn.close()
    if as_json:
        print(
            json.dumps(
                {m: {"active": _brief(a), "runs": [_brief(r) for r in h]} for m, (a, h) in rows.items()}
            )
        )
        return 0
    for m, (active, runs) in rows.items():
        print(f"model set {m}")
        print(f"  in use: {store.describe(active)}")
        if active is not None:
            print(_lines(active))
        if not runs:
            print("  no calibration recorded: run `citebot calibrate --source …`")
        for r in runs:
            print(
                f"  run {r.id}, {r.fitted_at:%Y-%m-%d %H:%M} UTC, {r.decision}: {r.figures.get('reason', '')}"
            )
    return 0


def _brief(c: Any) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "id": c.id,
        "fitted_at": c.fitted_at.isoformat(),
        "active": c.active,
        "decision": c.decision,
        "source": c.source,
        "abstain_below": c.abstain_below,
        "weak_below": c.weak_below,
        "questions": c.questions,
        "figures": c.figures,
    }


def _lines(c: Any) -> str:
    """The test-half table of a recorded run: each model set's figures with their intervals."""
    from worker.calibration.store import figures_table

    out = [
        f"  fitted {c.fitted_at:%Y-%m-%d %H:%M} UTC from {c.source}: "
        f"{c.questions.get('solved_topics')} solved topics; zone thresholds abstain < "
        f"{c.abstain_below:.3f}, weak < {c.weak_below:.3f}",
    ]
    out.extend(figures_table(c.figures.get("test_half", {})))
    return "\n".join(out)
