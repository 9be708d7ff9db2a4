"""``python -m eval.bench api_budget``: Discourse API calls per answered question, and an API backfill
running beside answering under the site-wide budget, on the soak's stack (two workers, the poller, the
webhook app, the forum double as strict as Discourse).

Two phases in one run:

1. **no budget**: the forum's admin-API limit and citebot's budget both lifted (as if neither existed);
   ``--questions`` questions asked one after the other: the latency of each answer and the API
   requests it cost (the forum's request log, requests with the API key);
2. **budget**: the forum at Discourse's default (60 requests a minute for the whole site), citebot at
   its defaults (40 a minute, bursts of 12, 5 kept for answers; workers restarted with them), an API
   backfill (``citebot backfill --source api``) running, and the same number of questions asked
   beside it. Reported: the latency of each answer, the requests the forum saw in the busiest minute,
   the 429s it answered.

The figure of merit is the ratio of the median answer latencies (phase 2 / phase 1), both measured in
this run on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.bench.report import emit, print_table
from eval.soak.stack import ROOT, SoakStack, StackOptions
from eval.soak.workload import Asked, Members, replied_posts
from eval.stack.procs import CITEBOT

DEFAULT_BUDGET = {
    "CITEBOT_DISCOURSE__SITE_API_LIMIT_PER_MINUTE": "60",
    "CITEBOT_DISCOURSE__API_REQUESTS_PER_MINUTE": "40",
    "CITEBOT_DISCOURSE__API_BURST": "12",
    "CITEBOT_DISCOURSE__API_RESERVE": "5",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.bench api_budget", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=8, help="questions per phase (default 8)")
    p.add_argument("--spacing", type=float, default=8.0, help="seconds between questions (default 8)")
    p.add_argument("--cache", type=Path, default=ROOT / ".cache", help="databases, Redis and logs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = StackOptions(
        cache=args.cache,
        poll_interval_s=30.0,
        max_retries=5,
        forum_api_limit=100_000,
        api_requests_per_minute=90_000.0,
        api_burst=1_000,
    )
    stack = SoakStack(options)
    try:
        stack.up()
        figures = run(stack, args.questions, args.spacing)
    finally:
        stack.down()
    f = figures
    rows = [
        ["no budget, answers alone", f["p50_s_no_budget"], f["calls_per_answer_no_budget"], "-"],
        ["budget, beside backfill", f["p50_s_budget"], f["calls_per_answer_budget"], f["peak_per_min"]],
    ]
    print_table(["phase", "answer p50 (s)", "API calls / answer", "peak calls / min"], rows)
    emit("api_budget", figures)
    return 0


def run(stack: SoakStack, questions: int, spacing: float) -> dict[str, Any]:
    work = Members(stack, seed=7)
    work.join()
    try:
        t0 = forum_clock(stack)
        free = ask_each(stack, work, range(questions), spacing)
        t1 = forum_clock(stack)
        free_calls = keyed_calls(stack, t0, t1)
        free_reads = reader_calls(stack, t0, t1)

        # Discourse's defaults, and citebot's.
        stack.http.post(
            f"{stack.forum_url}/__forum/api",
            headers=stack.admin_headers(),
            json={"admin_api_reqs_per_minute": 60},
        ).raise_for_status()
        stack.procs.env.update(DEFAULT_BUDGET)
        # Every process that calls Discourse restarts with the default budget (they share one bucket).
        for index in sorted(stack.workers):
            stack.kill_worker(index)
            stack.start_worker(index)
        with stack.lock:
            pollers = [c for c in stack.procs.children if c.name.startswith("poller")]
        for child in pollers:
            child.proc.kill()  # the supervisor starts it again, with the new environment
        t2 = forum_clock(stack)
        backfill = stack.procs.start(
            "backfill", [*CITEBOT, "backfill", "--source", "api", "--progress", "log"]
        )
        time.sleep(15)  # the backfill has the bucket to itself for a while: it sits at its floor
        paced = ask_each(stack, work, range(questions, 2 * questions), spacing)
        t3 = forum_clock(stack)
        still_running = backfill.proc.poll() is None
        backfill.proc.kill()
        busy_calls = keyed_calls(stack, t2, t3)
    finally:
        work.close()
    answer_calls = [c for c in busy_calls if _answer_route(c)]
    by_route: dict[str, int] = {}
    for c in free_calls:
        route = f"{c[3]} {_route_name(c[4])}"
        by_route[route] = by_route.get(route, 0) + 1
    return {
        "calls_by_route_no_budget": dict(sorted(by_route.items(), key=lambda kv: -kv[1])),
        "questions_per_phase": questions,
        "p50_s_no_budget": statistics.median(free),
        "p50_s_budget": statistics.median(paced),
        "latency_ratio": statistics.median(paced) / statistics.median(free),
        "max_s_budget": max(paced),
        "calls_per_answer_no_budget": len(free_calls) / questions,
        # Requests without the key (the reader: anonymous search and the last check before posting);
        # Discourse does not count them against the admin-API bucket.
        "reader_calls_per_answer_no_budget": len(free_reads) / questions,
        "calls_per_answer_budget": len(answer_calls) / questions,
        "peak_per_min": peak_per_window(busy_calls, 60.0),
        "calls_budget_phase": len(busy_calls),
        "backfill_calls": len(busy_calls) - len(answer_calls),
        "rate_limited_429": sum(1 for c in busy_calls if c[2] == 429),
        "backfill_still_running": still_running,
        "forum_limit_per_min": 60,
        "citebot_budget_per_min": "40 + burst 12, reserve 5",
    }


def ask_each(stack: SoakStack, work: Members, indexes: range, spacing: float) -> list[float]:
    """Ask one question at a time and wait for its reply; the seconds from asking to the reply."""
    latencies = []
    for i in indexes:
        started = time.monotonic()
        asked = work.ask(i)
        latencies.append(_wait_reply(stack, asked))
        time.sleep(max(0.0, spacing - (time.monotonic() - started)))
    return latencies


def _wait_reply(stack: SoakStack, asked: Asked, timeout_s: float = 180.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = replied_posts(stack.forum_db_url, [asked]).get(asked.post_id)
        if replies:
            return min(replies) - asked.asked_at
        time.sleep(0.1)
    raise RuntimeError(f"question {asked.post_id} not answered in {timeout_s:.0f} s")


def forum_clock(stack: SoakStack) -> float:
    r = stack.http.get(f"{stack.forum_url}/__forum/api?since=1e18", headers=stack.admin_headers())
    r.raise_for_status()
    return float(r.json()["now"])


def keyed_calls(stack: SoakStack, since: float, until: float) -> list[list[Any]]:
    """The requests made with the API key between two forum clock readings: [at, keyed, status, …]."""
    r = stack.http.get(
        f"{stack.forum_url}/__forum/api", params={"since": since}, headers=stack.admin_headers()
    )
    r.raise_for_status()
    return [c for c in r.json()["calls"] if c[1] and c[0] <= until and not c[4].startswith("/__forum/")]


def reader_calls(stack: SoakStack, since: float, until: float) -> list[list[Any]]:
    """The GETs made without the admin key between two forum clock readings (members only post)."""
    r = stack.http.get(
        f"{stack.forum_url}/__forum/api", params={"since": since}, headers=stack.admin_headers()
    )
    r.raise_for_status()
    return [
        c
        for c in r.json()["calls"]
        if not c[1] and c[3] == "GET" and c[0] <= until and not c[4].startswith("/__forum/")
    ]


def peak_per_window(calls: list[list[Any]], window_s: float) -> int:
    """The most requests in any window of ``window_s`` seconds."""
    times = sorted(float(c[0]) for c in calls)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _route_name(path: str) -> str:
    """``/posts/45678.json`` → ``/posts/{id}.json``: the route, without ids."""
    return "/".join("{id}" if part.split(".")[0].isdigit() else part for part in path.split("/"))


def _answer_route(call: list[Any]) -> bool:
    method, path = call[3], call[4]
    if method == "GET" and path in ("/posts.json", "/site.json"):
        return False  # the API backfill's reads (it also reads /t/{id}.json: counted as the backfill's)
    return not (method == "GET" and path.startswith("/t/"))
