"""Reconciliation of the forum against the questions, and the report (table, one JSON line, files)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from eval.soak.workload import FAULT_NAMES, Asked, FaultRecord, replied_posts

OPEN_STATES = ("queued", "retrieved", "generated")


@dataclass(frozen=True, slots=True)
class Row:
    state: str
    reply_post_id: int | None
    enqueued_by: str | None
    attempts: int
    trace: dict[str, Any] | None
    error: str | None


def answer_rows(db_url: str, post_ids: Sequence[int]) -> dict[int, Row]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT post_id, state, reply_post_id, enqueued_by, attempts, trace, error FROM answers"
            " WHERE post_id = ANY(%s)",
            (list(post_ids),),
        ).fetchall()
    return {int(r[0]): Row(str(r[1]), r[2], r[3], int(r[4] or 0), r[5], r[6]) for r in rows}


def stage_totals(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Sum of each stage's duration over the answers' traces (plus the posting step)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        trace = row.trace or {}
        stages = list(trace.get("stages") or [])
        post = trace.get("post")
        if isinstance(post, dict):
            stages.append({"name": "post", "duration_ms": post.get("duration_ms", 0.0)})
        for st in stages:
            name = str(st.get("name"))
            if name == "retrieve_total":  # the sum of its sub-stages, counted by them
                continue
            sums[name] = sums.get(name, 0.0) + float(st.get("duration_ms") or 0.0)
            counts[name] = counts.get(name, 0) + 1
    total = sum(sums.values()) or 1.0
    return {
        name: {
            "sum_s": round(ms / 1000, 3),
            "mean_ms": round(ms / counts[name], 2),
            "share": round(ms / total, 4),
        }
        for name, ms in sorted(sums.items(), key=lambda kv: -kv[1])
    }


def reconcile(
    *,
    forum_db_url: str,
    db_url: str,
    asked: list[Asked],
    faults: list[FaultRecord],
    workers: int,
    run: dict[str, Any],
    deliveries: dict[int, list[str]] | None = None,
) -> dict[str, Any]:
    replies = replied_posts(forum_db_url, asked)
    rows = answer_rows(db_url, [a.post_id for a in asked])
    once = dup = unanswered = pending = apology = silent = 0
    non_answers: dict[str, int] = {}
    latencies: list[float] = []
    duplicates: list[int] = []
    missing: list[dict[str, Any]] = []
    for a in asked:
        got = replies.get(a.post_id, [])
        row = rows.get(a.post_id)
        if len(got) == 1:
            once += 1
            if row is not None and row.state == "failed":
                apology += 1
        elif len(got) > 1:
            dup += 1
            duplicates.append(a.post_id)
        elif row is not None and row.state in OPEN_STATES:
            pending += 1
            missing.append(
                {"post_id": a.post_id, "state": row.state, "attempts": row.attempts, "error": row.error}
            )
        else:
            unanswered += 1
            if row is not None:  # decided without a reply: the reason recorded, or none (silent)
                reason = (row.error or "").strip()
                key = f"{row.state}: {reason[:80]}" if reason else row.state
                non_answers[key] = non_answers.get(key, 0) + 1
                silent += 0 if reason else 1
            else:
                silent += 1  # asked, and no trace of it at all
            missing.append(
                {
                    "post_id": a.post_id,
                    "state": row.state if row else None,
                    "asked_at_s": round(a.asked_at - asked[0].asked_at, 1),
                    "deliveries": (deliveries or {}).get(a.post_id, []),
                }
            )
        if got:
            latencies.append(min(got) - a.asked_at)
    first = min((a.asked_at for a in asked), default=0.0)
    last_reply = max((min(t) for t in replies.values()), default=first)
    span = max(last_reply - first, 1e-9)
    answered = once + dup
    lat = np.array(latencies) if latencies else np.array([0.0])
    by: dict[str, int] = {}
    for row in rows.values():
        key = row.enqueued_by or "?"
        by[key] = by.get(key, 0) + 1
    states: dict[str, int] = {}
    for row in rows.values():
        states[row.state] = states.get(row.state, 0) + 1
    fault_out = []
    for f in faults:
        recovered = [min(replies[p]) for p in f.open_questions if p in replies]
        left = [p for p in f.open_questions if p not in replies]
        fault_out.append(
            {
                "fault": f.name,
                "at_s": round(f.at - first, 1),
                "detail": f.detail,
                "open_at_fault": len(f.open_questions),
                "all_answered_within_s": round(max(recovered) - f.at, 1) if recovered and not left else None,
                "never_answered": len(left),
            }
        )
    return {
        **run,
        "questions": len(asked),
        "answered_once": once,
        "duplicates": dup,
        "unanswered": unanswered,
        "pending": pending,
        "failed_with_apology": apology,
        # not answered and no reason recorded (no row, or a final state without one): must be 0
        "silently_unanswered": silent,
        "non_answers": non_answers,
        "throughput_qps": round(answered / span, 3),
        "throughput_qps_per_worker": round(answered / span / max(workers, 1), 3),
        "span_s": round(span, 1),
        "latency_p50_s": round(float(np.percentile(lat, 50)), 2),
        "latency_p95_s": round(float(np.percentile(lat, 95)), 2),
        "latency_p99_s": round(float(np.percentile(lat, 99)), 2),
        "latency_max_s": round(float(lat.max()), 2),
        "states": states,
        "enqueued_by": by,
        "faults": fault_out,
        "stages": stage_totals([r for r in rows.values() if r.state in ("posted", "abstained")]),
        "duplicate_post_ids": duplicates[:50],
        "missing": missing[:50],
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"soak: {report['questions']} questions, {report['workers']} worker processes,"
        f" faults: {report['faults_on']}",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for key in (
        "answered_once", "duplicates", "unanswered", "silently_unanswered", "pending", "failed_with_apology",
        "throughput_qps", "throughput_qps_per_worker", "span_s", "drain_s",
        "latency_p50_s", "latency_p95_s", "latency_p99_s", "latency_max_s",
    ):  # fmt: skip
        lines.append(f"| {key} | {report.get(key)} |")
    lines.append(f"| states | {report['states']} |")
    lines.append(f"| not answered, by state and reason | {report.get('non_answers')} |")
    lines.append(f"| enqueued_by | {report['enqueued_by']} |")
    lines.append(f"| webhook relay | {report.get('relay')} |")
    lines.append(f"| forum webhook log | {report.get('forum_webhooks')} |")
    lines.append(f"| processes that exited by themselves (restarted) | {report.get('crashes')} |")
    if report["faults"]:
        lines += [
            "",
            "| t (s) | fault | open then | all answered within (s) | never answered | what |",
            "|---|---|---|---|---|---|",
        ]
        for f in report["faults"]:
            lines.append(
                f"| {f['at_s']} | {f['fault']} | {f['open_at_fault']} | {f['all_answered_within_s']} |"
                f" {f['never_answered']} | {f['detail']} |"
            )
    if report["stages"]:
        lines += ["", "| stage | sum (s) | mean (ms) | share |", "|---|---|---|---|"]
        for name, s in report["stages"].items():
            lines.append(f"| {name} | {s['sum_s']} | {s['mean_ms']} | {s['share'] * 100:.1f}% |")
    return "\n".join(lines)


def save(report: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    faults = (
        "all"
        if report["faults_on"] == ",".join(sorted(FAULT_NAMES))
        else report["faults_on"].replace(",", "+")
    )
    path = out / f"soak-{report['questions']}-{faults}.json"
    path.write_text(json.dumps(report, indent=1, sort_keys=True), "utf-8")
    (out / path.name.replace(".json", ".md")).write_text(render(report) + "\n", "utf-8")
    return path
