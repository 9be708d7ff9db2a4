"""``python -m eval.soak``: N questions through the whole stack while faults are injected, then a
reconciliation of the forum against the questions (answered once, twice, never, still pending)."""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from eval.soak.report import reconcile, render, save
from eval.soak.stack import ROOT, SoakError, SoakStack, StackOptions
from eval.soak.workload import FAULT_NAMES, Asked, FaultPlan, Members, open_questions
from eval.stack.procs import DemoError, tail


def parse_faults(value: str) -> set[str]:
    if value == "all":
        return set(FAULT_NAMES)
    if value == "none":
        return set()
    names = {v.strip() for v in value.split(",") if v.strip()}
    unknown = names - set(FAULT_NAMES)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault(s): {', '.join(sorted(unknown))}")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.soak", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--questions", type=int, default=200, help="member questions to ask (default 200)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--threads", type=int, default=2, help="threads per worker process (default 2)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--llm-latency-ms", type=float, default=0.0, help="fake LLM latency (default 0)")
    p.add_argument("--rate", type=float, default=4.0, help="questions asked per second (0: all at once)")
    p.add_argument(
        "--faults",
        type=parse_faults,
        default=set(FAULT_NAMES),
        help=f"all, none or a list of {','.join(FAULT_NAMES)}",
    )
    p.add_argument("--drain-timeout", type=float, default=300.0, help="seconds to wait for pending questions")
    p.add_argument(
        "--settle", type=float, default=12.0, help="seconds to wait after the drain for late duplicates"
    )
    p.add_argument("--poll-interval", type=float, default=1.0, help="catch-up poller interval (s)")
    p.add_argument("--cache", type=Path, default=ROOT / ".cache", help="databases, Redis and logs")
    p.add_argument("--out", type=Path, default=ROOT / "eval" / "results" / "soak")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        report = run(args)
    except KeyboardInterrupt:
        print("interrupted: everything the soak started has been stopped", file=sys.stderr)
        return 130
    except (SoakError, DemoError) as exc:
        print(f"soak failed: {exc}", file=sys.stderr)
        if isinstance(exc, DemoError) and exc.log is not None:
            print(f"--- last lines of {exc.log} ---\n{tail(exc.log)}", file=sys.stderr)
        return 2
    print(render(report))
    print(json.dumps({k: v for k, v in report.items() if k not in ("missing", "duplicate_post_ids")}))
    path = save(report, args.out)
    print(f"saved {path}", file=sys.stderr)
    ok = (
        report["duplicates"] == 0
        and report["unanswered"] == 0
        and report["pending"] == 0
        and report["silently_unanswered"] == 0
        and not report["fault_errors"]  # a fault that could not run, or found what it checks broken
    )
    return 0 if ok else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    stack = SoakStack(
        StackOptions(
            cache=args.cache,
            workers=args.workers,
            threads=args.threads,
            llm_latency_ms=args.llm_latency_ms,
            poll_interval_s=args.poll_interval,
            seed=args.seed,
        )
    )
    asked: list[Asked] = []
    plan: FaultPlan | None = None
    members: Members | None = None
    try:
        say(f"bringing the stack up (logs in {stack.logs})")
        started = time.monotonic()
        stack.up()
        say(f"stack up in {time.monotonic() - started:.0f} s; asking {args.questions} questions")
        members = Members(stack, args.seed)
        members.join()
        extra = itertools.count(args.questions)  # questions a fault asks in its window: numbered after
        plan = FaultPlan(
            stack, args.faults, asked, args.questions, ask=partial(_ask_one, members, asked, extra)
        )
        plan.start()
        ask_all(stack, members, asked, args.questions, args.rate)
        say(f"all {len(asked)} asked; waiting for the fault schedule to finish")
        plan.join(600)
        drain_started = time.time()
        left = drain(stack, asked, args.drain_timeout)
        drain_s = time.time() - drain_started
        say(
            f"drain: {len(left)} open after {drain_s:.0f} s; settling {args.settle:.0f} s for late duplicates"
        )
        time.sleep(args.settle)
        stats = stack.relay.stats
        webhooks = stack.forum_webhook_log()
        forum_statuses: dict[str, int] = {}
        for d in webhooks:
            forum_statuses[str(d["status"])] = forum_statuses.get(str(d["status"]), 0) + 1
        return reconcile(
            forum_db_url=stack.forum_db_url,
            db_url=stack.db_url,
            asked=asked,
            faults=plan.records,
            workers=args.workers,
            deliveries=stats.by_post,
            run={
                "workers": args.workers,
                "threads": args.threads,
                "rate": args.rate,
                "llm_latency_ms": args.llm_latency_ms,
                "faults_on": ",".join(sorted(args.faults)) or "none",
                "seed": args.seed,
                "drain_timeout_s": args.drain_timeout,
                "drain_s": round(drain_s, 1),
                "fault_errors": plan.errors,
                "member_post_retries": members.failed_attempts,
                "relay": {
                    "received": stats.received,
                    "sent": stats.sent,
                    "extra_copies": stats.copies_extra,
                    "forged": stats.forged,
                    "forged_401": stats.forged_rejected,
                    "forged_accepted": stats.forged_accepted,
                    "outcomes": dict(stats.outcomes),
                },
                "forum_webhooks": forum_statuses,
                "crashes": crash_summary(stack),
            },
        )
    finally:
        if plan is not None:
            plan.stop()
        if members is not None:
            members.close()
        stack.down()


def _ask_one(members: Members, asked: list[Asked], numbers: Iterator[int]) -> None:
    asked.append(members.ask(next(numbers)))


def crash_summary(stack: SoakStack) -> dict[str, Any]:
    """Processes that exited by themselves: how many times, and the last line each logged."""
    out: dict[str, Any] = {}
    for crash in stack.crashes:
        base = crash.name.split("-r")[0]
        entry = out.setdefault(base, {"exits": 0, "last_line": ""})
        entry["exits"] += 1
        entry["last_line"] = crash.last_line[:200]
    return out


def ask_all(stack: SoakStack, members: Members, asked: list[Asked], n: int, rate: float) -> None:
    """Ask ``n`` questions at ``rate`` per second (two askers, so a slow forum does not stall the pace)."""
    lock = threading.Lock()
    counter = iter(range(n))
    start = time.monotonic()
    errors: list[BaseException] = []

    def asker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            if rate > 0:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            try:
                got = members.ask(i)
            except BaseException as exc:  # reported by the caller
                errors.append(exc)
                return
            with lock:
                asked.append(got)

    threads = [threading.Thread(target=asker, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    last = time.monotonic()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(1.0)
        stack.check_alive()
        if time.monotonic() - last > 15:
            last = time.monotonic()
            say(f"  asked {len(asked)}/{n}")
    if errors:
        raise SoakError(f"asking failed: {errors[0]}")


def drain(stack: SoakStack, asked: list[Asked], timeout_s: float) -> list[int]:
    """Wait until every question has a reply on the forum, or ``timeout_s`` passes; the open ones."""
    deadline = time.monotonic() + timeout_s
    last = 0.0
    while True:
        left = open_questions(stack, asked)
        if not left or time.monotonic() > deadline:
            return left
        if time.monotonic() - last > 15:
            last = time.monotonic()
            say(f"  {len(left)} question(s) without a reply")
        stack.check_alive()
        time.sleep(1.0)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
