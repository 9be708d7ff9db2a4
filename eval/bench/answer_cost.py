"""``python -m eval.bench answer_cost``: what one answered question costs, this tree against a baseline
tree, in one run: the answer latency and the Discourse API requests per answer.

Each tree runs its own ``python -m eval.bench api_budget`` (the soak's stack: two workers, the poller,
the webhook app, its own forum double) one after the other, on this machine, with the same workload
(the same members and questions, seed 7). Only the first phase is compared: questions asked one at a
time with no API budget in the way. Reported per tree: the median seconds from asking to the reply, the
requests made with the admin key per answer (they spend the site's 60-a-minute bucket), and the
requests made without it (the reader's anonymous search and re-reads, which do not).

The baseline is a git revision (default: the commit before the permissions work, ``2d014a1``); it is
checked out once as a detached worktree under ``.cache/answer-cost/``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.bench.report import emit, print_table

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".cache" / "answer-cost"
BASELINE = "2d014a1"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.bench answer_cost", description=__doc__.split("\n")[0])
    p.add_argument("--baseline", default=BASELINE, help=f"git revision to compare with (default {BASELINE})")
    p.add_argument("--questions", type=int, default=8, help="questions per tree (default 8)")
    p.add_argument("--spacing", type=float, default=8.0, help="seconds between questions (default 8)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    baseline = checkout(args.baseline)
    before = measure(baseline, WORK / "cache-baseline", args.questions, args.spacing)
    after = measure(ROOT, WORK / "cache-this", args.questions, args.spacing)
    figures = {
        "baseline": args.baseline,
        "questions": args.questions,
        "p50_s_before": before["p50_s_no_budget"],
        "p50_s_after": after["p50_s_no_budget"],
        "latency_ratio": after["p50_s_no_budget"] / before["p50_s_no_budget"],
        "keyed_calls_per_answer_before": before["calls_per_answer_no_budget"],
        "keyed_calls_per_answer_after": after["calls_per_answer_no_budget"],
        "reader_calls_per_answer_before": before.get("reader_calls_per_answer_no_budget", 0.0),
        "reader_calls_per_answer_after": after.get("reader_calls_per_answer_no_budget", 0.0),
        "keyed_calls_by_route_before": before["calls_by_route_no_budget"],
        "keyed_calls_by_route_after": after["calls_by_route_no_budget"],
    }
    print_table(
        ["tree", "answer p50 (s)", "admin-key calls / answer", "keyless calls / answer"],
        [
            [
                f"baseline {args.baseline}",
                figures["p50_s_before"],
                figures["keyed_calls_per_answer_before"],
                figures["reader_calls_per_answer_before"],
            ],
            [
                "this tree",
                figures["p50_s_after"],
                figures["keyed_calls_per_answer_after"],
                figures["reader_calls_per_answer_after"],
            ],
        ],
    )
    emit("answer_cost", figures)
    return 0


def checkout(revision: str) -> Path:
    """A detached worktree of ``revision`` (created once, reused)."""
    folder = WORK / f"tree-{revision}"
    if not (folder / "worker").is_dir():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(folder), revision],
            check=True,
            capture_output=True,
        )
    return folder


def measure(tree: Path, cache: Path, questions: int, spacing: float) -> dict[str, Any]:
    """Run ``tree``'s own api_budget bench (its code first on the path) and read its JSON line."""
    argv = [sys.executable, "-m", "eval.bench", "api_budget", "--questions", str(questions)]
    argv += ["--spacing", str(spacing), "--cache", str(cache)]
    print(f"answer_cost: measuring {tree} ...", flush=True)
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"bench": "api_budget"')]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"api_budget failed in {tree} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


if __name__ == "__main__":
    raise SystemExit(main())
