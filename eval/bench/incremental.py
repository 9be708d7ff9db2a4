"""``python -m eval.bench incremental [--export DIR] [--new 200]``: an incremental API backfill over a
forum export, killed (SIGKILL) in the middle and resumed, with recall probed through the HNSW index
all along (issue 33, finding 4).

The Discourse double (``eval/stack/forum``) serves the export from an embedded PostgreSQL of its own
(``.cache/pg-bench-incremental``); the index is filled by a first, full ``api`` walk (a bulk load into the
empty table), then ``--new`` replies are posted across ``--topics`` topics, and the scheduled
incremental run reads them: in a child process that is killed after its first committed page, then
again to the end. A thread runs a nearest-neighbour query through the HNSW index (sequential scans off)
every 0.2 s from before the kill to after the rerun: each must use the index and return rows. Embedder:
the hashed bag-of-words ``FakeEmbedder`` (no model). Printed: the API requests of the incremental runs
(the double's log) per changed post, what each run embedded, the index's state after the kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import psycopg

from backfill.run import BackfillOptions, run_backfill
from backfill.sources.api import ApiSource
from eval.bench.report import emit
from eval.stack.forum.app import ApiCall, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import Launcher
from eval.stack.postgres import EmbeddedPostgres, ensure_database, wait_for_checkpoint
from worker.budget import ApiBudget
from worker.db.migrate import migrate
from worker.db.vector_index import index_state
from worker.settings import DatabaseSettings, DiscourseSettings, Settings
from worker.testing.models import FakeEmbedder

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-incremental-key"
MODEL = "fake-embedder"


def _source(url: str, per_minute: float) -> ApiSource:
    settings = DiscourseSettings.model_validate(
        {
            "base_url": url,
            "api_key": KEY,
            "site_api_limit_per_minute": 1_000_000,
            "api_requests_per_minute": per_minute,
            "api_burst": 100,
        }
    )
    return ApiSource(httpx.Client(timeout=30), settings, budget=ApiBudget(settings))


def _run(url: str, db_url: str, dimension: int, per_minute: float) -> dict[str, object]:
    summary = run_backfill(
        DatabaseSettings(url=db_url),  # type: ignore[call-arg]
        _source(url, per_minute),
        FakeEmbedder(model=MODEL, dimension=dimension),
        BackfillOptions(progress=False),
    )
    return summary.as_dict()


def child(argv: list[str]) -> int:
    """The killable incremental run (``--child URL DB_URL DIM PER_MINUTE``)."""
    url, db_url, dimension, per_minute = argv
    _run(url, db_url, int(dimension), float(per_minute))
    return 0


class Prober(threading.Thread):
    """Nearest-neighbour queries through the HNSW index, every 0.2 s, until stopped."""

    def __init__(self, db_url: str, vector: list[float]) -> None:
        super().__init__(daemon=True)
        self.db_url = db_url
        self.vector = "[" + ",".join(str(x) for x in vector) + "]"
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        query = "SELECT post_id FROM post_index ORDER BY embedding <=> %s::halfvec LIMIT 10"
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.db_url, autocommit=True) as conn:
                    conn.execute("SET enable_seqscan = off")
                    plan = " ".join(str(r[0]) for r in conn.execute("EXPLAIN " + query, (self.vector,)))
                    rows = conn.execute(query, (self.vector,)).fetchall()
                    state = index_state(conn)
                if "hnsw" not in plan or len(rows) != 10 or state != "valid":
                    self.failures.append(f"index {state}, {len(rows)} rows, plan {plan[:80]}")
                else:
                    self.ok += 1
            except psycopg.Error as exc:
                self.failures.append(str(exc))
            self.stop.wait(0.2)


def _post_replies(url: str, topic_ids: list[int], n: int, round_: int) -> list[int]:
    ids = []
    with httpx.Client(base_url=url, headers={"Api-Key": KEY, "Api-Username": "system"}, timeout=30) as http:
        for i in range(n):
            topic = topic_ids[i % len(topic_ids)]
            # Distinct texts: Discourse returns the first post for the same user's identical one.
            raw = f"Incremental bench reply {round_}.{i}: rebuild with URHO3D_SAMPLES off, try again."
            response = http.post("/posts.json", json={"topic_id": topic, "raw": raw})
            response.raise_for_status()
            ids.append(int(response.json()["id"]))
    return ids


def _gets(forum_calls: Sequence[ApiCall], since: int) -> int:
    """The GET requests the forum logged from index ``since`` on (the backfill's reads)."""
    return sum(1 for c in forum_calls[since:] if c.method == "GET")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m eval.bench incremental")
    parser.add_argument("--export", type=Path, default=ROOT.parent / "shared" / "data" / "urho3d")
    parser.add_argument("--new", type=int, default=200, help="replies posted before the incremental run")
    parser.add_argument("--topics", type=int, default=100, help="across this many of the newest topics")
    parser.add_argument("--dimension", type=int, default=64)
    parser.add_argument("--per-minute", type=float, default=600.0, help="the incremental run's API pace")
    args = parser.parse_args(argv)

    server = EmbeddedPostgres(ROOT / ".cache" / "pg-bench-incremental")
    admin = server.start()
    try:
        url = ensure_database(admin, "citebot_bench_incremental", fresh=True)
        forum_url = ensure_database(admin, "citebot_bench_incremental_forum", fresh=True)
        migrate(
            Settings.model_validate(
                {"database": {"url": url}, "embeddings": {"model": MODEL, "dimension": args.dimension}}
            )
        )
        store = ForumStore(forum_url)
        loaded = load_export(store, args.export.resolve())
        with Launcher(ROOT / ".cache" / "bench-incremental-logs") as launcher:
            launcher.on_stop(store.close)
            app = create_forum_app(store, ForumConfig(api_key=KEY, admin_api_reqs_per_minute=1_000_000))
            launcher.on_stop(app.close)
            base = launcher.thread(app.app, name="forum")

            t0 = time.perf_counter()
            first = _run(base, url, args.dimension, 100_000)
            first_s = time.perf_counter() - t0
            first_gets = _gets(app.calls, 0)

            with psycopg.connect(forum_url) as conn:
                newest = [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT id FROM forum.topics WHERE archetype = 'regular' AND visible"
                        " AND deleted_at IS NULL ORDER BY id DESC LIMIT %s",
                        (args.topics,),
                    )
                ]
            new = _post_replies(base, newest, args.new, 1)
            mark = len(app.calls)
            app.faults.update({"latency_s": 0.05})  # a remote forum's round trip, and time to stop it

            embedder = FakeEmbedder(model=MODEL, dimension=args.dimension)
            prober = Prober(url, [float(x) for x in embedder.embed(["shadows flicker on the terrain"])[0]])
            prober.start()
            command = [sys.executable, "-m", "eval.bench", "incremental", "--child", base, url]
            proc = subprocess.Popen(
                [*command, str(args.dimension), str(args.per_minute)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            saved = wait_for_checkpoint(url, "api", running=lambda: proc.poll() is None, timeout_s=600)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            killed_gets = _gets(app.calls, mark)
            with psycopg.connect(url) as conn:
                state_after_kill = index_state(conn)
                indexed_after_kill = conn.execute(
                    "SELECT count(*) FROM post_index WHERE post_id = ANY(%s)", (new,)
                ).fetchone()
            mark2 = len(app.calls)
            t1 = time.perf_counter()
            rerun = _run(base, url, args.dimension, args.per_minute)
            rerun_s = time.perf_counter() - t1
            rerun_gets = _gets(app.calls, mark2)
            # The same again without the kill, and a run with nothing new: the steady-state cost.
            more = _post_replies(base, newest, args.new, 2)
            mark3 = len(app.calls)
            straight = _run(base, url, args.dimension, args.per_minute)
            straight_gets = _gets(app.calls, mark3)
            mark4 = len(app.calls)
            idle = _run(base, url, args.dimension, args.per_minute)
            idle_gets = _gets(app.calls, mark4)
            new += more
            time.sleep(0.5)
            prober.stop.set()
            prober.join(10)
            with psycopg.connect(url) as conn:
                final = conn.execute(
                    "SELECT count(*), count(DISTINCT post_id), count(*) FILTER (WHERE post_id = ANY(%s))"
                    " FROM post_index",
                    (new,),
                ).fetchone()
                state = index_state(conn)
                cursor = conn.execute(
                    "SELECT cursor, status FROM backfill_state WHERE source = 'api'"
                ).fetchone()
    finally:
        server.stop()

    if final is None or indexed_after_kill is None:  # pragma: no cover - count(*) always yields a row
        raise RuntimeError("no counts")
    result = {
        "export": str(args.export),
        "loaded_posts": loaded.posts,
        "first_walk": {"seen": first["seen"], "embedded": first["embedded"], "bulk": first["bulk"],
                       "api_gets": first_gets, "seconds": round(first_s, 1)},
        "changed_posts": args.new,
        "changed_topics": len(set(newest)),
        "killed_run": {"api_gets": killed_gets, "new_posts_committed": int(indexed_after_kill[0]),
                       "checkpoint": saved, "index_after_kill": state_after_kill},
        "rerun": {"resumed_from": rerun["resumed_from"], "seen": rerun["seen"], "embedded": rerun["embedded"],
                  "skipped": rerun["skipped"], "bulk": rerun["bulk"], "index_build_s": rerun["index_build_s"],
                  "api_gets": rerun_gets, "seconds": round(rerun_s, 1)},
        "api_gets_per_changed_post": round((killed_gets + rerun_gets) / max(1, args.new), 3),
        "uninterrupted": {"changed_posts": args.new, "seen": straight["seen"],
                          "embedded": straight["embedded"], "api_gets": straight_gets,
                          "api_gets_per_changed_post": round(straight_gets / args.new, 3)},
        "nothing_new": {"seen": idle["seen"], "embedded": idle["embedded"], "api_gets": idle_gets},
        "final": {"rows": final[0], "distinct": final[1], "new_posts_indexed": final[2], "index": state,
                  "cursor": cursor[0] if cursor else None, "status": cursor[1] if cursor else None},
        "recall_probes": {"ok": prober.ok, "failures": len(prober.failures),
                          "first_failures": prober.failures[:3]},
    }  # fmt: skip
    emit("incremental", result)
    return 0 if not prober.failures and state == "valid" and final[2] == len(new) else 1
