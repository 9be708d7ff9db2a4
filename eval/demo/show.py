"""Printing for the demo: step headers with timings, and a reply with its links, zone and stage timings."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO


class Steps:
    """Numbered step headers; each step prints its duration when it ends."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total = total
        self.n = 0
        self.out = out or sys.stdout
        self.started = time.monotonic()

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.n += 1
        self.say(f"\n[{self.n}/{self.total}] {title}")
        began = time.monotonic()
        yield
        self.say(f"      done in {time.monotonic() - began:.1f} s")

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def stage_line(trace: Mapping[str, Any]) -> str:
    """``load 12 ms · gate 0.1 ms · embed 40 ms · … · post 30 ms`` from a stored answer trace."""
    parts = []
    for stage in trace.get("stages", []):
        if isinstance(stage, dict) and "name" in stage:
            parts.append(f"{stage['name']} {_ms(stage.get('duration_ms'))}")
    post = trace.get("post")
    if isinstance(post, dict):
        parts.append(f"post {_ms(post.get('duration_ms'))}")
    return " · ".join(parts) or "(no stage timings recorded)"


def _ms(value: object) -> str:
    ms = float(value) if isinstance(value, int | float) else 0.0
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def print_reply(
    out: TextIO,
    *,
    label: str,
    question: str,
    reply: str,
    seen_after_s: float,
    row: Mapping[str, Any] | None,
    link_checks: Sequence[tuple[str, bool, str]],
) -> None:
    """One question and the bot's reply as they appear on the forum, with what the answers table says."""
    print(f"\n  ── {label} ──", file=out)
    print(f"  member asked:  {question}", file=out)
    print(f"  bot replied after {seen_after_s:.1f} s:", file=out)
    for line in reply.splitlines() or [""]:
        print(f"    │ {line}", file=out)
    if row is None:
        print("  answers row: (not found)", file=out)
    else:
        zone = row.get("zone") or "-"
        print(f"  state: {row.get('state')}   zone: {zone}   rule: {row.get('rule_id') or '-'}", file=out)
        trace = row.get("trace") or {}
        print(f"  stages: {stage_line(trace)}", file=out)
        fallbacks = trace.get("fallbacks") or []
        if fallbacks:
            text = ", ".join(f"{f.get('stage')}: {f.get('reason')}" for f in fallbacks if isinstance(f, dict))
            print(f"  fallbacks: {text}", file=out)
        for source in row.get("sources") or []:
            if isinstance(source, dict):
                print(
                    f"  source [{source.get('n')}] {source.get('title')!s:.70} "
                    f"(topic {source.get('topic_id')} #{source.get('post_number')}, "
                    f"score {_score(source.get('score'))})",
                    file=out,
                )
    if link_checks:
        for url, ok, how in link_checks:
            print(f"  link {'✓' if ok else '✗'} {url}  ({how})", file=out)
    else:
        print("  links: none", file=out)


def _score(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"
