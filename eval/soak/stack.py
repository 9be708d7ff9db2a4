"""The soak's stack on loopback: every service a child process (or a thread here), each one restartable.

Two PostgreSQL servers: the bot's (restarted by the PostgreSQL fault) and the forum's (Discourse has its
own database; restarting the bot's must not take the forum down with it).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from backfill.hnsw import index_state
from eval.soak.models import DIMENSION, EMBEDDER, MODEL
from eval.soak.relay import StormRelay
from eval.stack.launcher import (
    Launcher,
    base_env,
    index_with,
    poller_argv,
    webhook_argv,
    webhook_url,
    worker_argv,
)
from eval.stack.postgres import ensure_database, with_database
from eval.stack.procs import CITEBOT, Child, tail
from eval.stack.redis import RedisServer, free_port
from gate.intent import BENIGN, IntentLayer
from gate.train.data import exemplars_text

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "eval" / "data" / "urho3d-sample"
BOT = "citebot"
NAMESPACE = "citebot-soak"
# Every flag on: the intent layer included, so that an embedder outage exercises its fallback too.
FLAGS = ("enabled", "posts_pipeline", "input_gate", "rerank", "post_links", "intent_layer")


class SoakError(Exception):
    """The stack could not be brought up or a child died."""


@dataclass(frozen=True, slots=True)
class Crash:
    """A citebot process that exited by itself (the supervisor started it again, as compose would)."""

    name: str
    code: int | None
    at: float
    last_line: str


@dataclass(frozen=True, slots=True)
class StackOptions:
    cache: Path
    workers: int = 2
    threads: int = 2
    llm_latency_ms: float = 0.0
    poll_interval_s: float = 1.0
    max_retries: int = 20
    seed: int = 1
    # The forum's max_admin_api_reqs_per_minute and citebot's share of it: a soak asks fast, so it runs
    # as an operator who raised DISCOURSE_MAX_ADMIN_API_REQS_PER_MINUTE would (docs/intake.md).
    forum_api_limit: int = 6000
    api_requests_per_minute: float = 4800.0
    api_burst: int = 100


class SoakStack:
    """Brings the services up, restarts them on demand, and stops every one of them."""

    def __init__(self, options: StackOptions) -> None:
        self.o = options
        self.cache = options.cache.resolve()
        self.logs = self.cache / "soak" / "logs"
        self.api_key = secrets.token_hex(20)
        self.session_key = secrets.token_hex(20)  # the members' browser sessions
        self.secret = secrets.token_hex(20)
        self.ports = {name: free_port() for name in ("models", "forum", "webhook", "relay")}
        self.forum_url = f"http://127.0.0.1:{self.ports['forum']}"
        self.models_url = f"http://127.0.0.1:{self.ports['models']}"
        self.webhook_url = webhook_url(self.ports["webhook"])
        self.redis_port = free_port()
        self.launcher = Launcher(self.logs, base_env())
        self.procs = self.launcher.procs
        self.relay = StormRelay(self.webhook_url, seed=options.seed)
        self.relay_url = f"http://127.0.0.1:{self.ports['relay']}"
        self.workers: dict[int, Child] = {}
        self.restarts: dict[str, int] = {}
        self.db_url = ""
        self.forum_db_url = ""
        self.http = httpx.Client(timeout=15.0)
        self.crashes: list[Crash] = []
        self.lock = threading.RLock()
        self._supervising = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True)

    # -- up and down -------------------------------------------------------------------------------

    def up(self) -> None:
        # Redis starts empty: the forum restarts from the sample, so an earlier run's dedupe keys
        # (post ids are reused) would turn this run's deliveries into "duplicates".
        for old in (self.cache / "soak").glob("redis-*"):
            shutil.rmtree(old, ignore_errors=True)
        for log in self.logs.glob("*.log"):  # only this run's logs in the folder
            log.unlink()
        self.pg = self.launcher.embedded_postgres(self.cache / "soak-pg")
        self.db_url = ensure_database(self.pg.url or "", "citebot_soak", fresh=True)
        forum_pg = self.launcher.postgres(self.cache / "soak-forum-pg")
        self.forum_db_url = ensure_database(forum_pg, "citebot_soak_forum", fresh=True)
        self.redis = self._redis(self.cache / "soak" / "redis-aof", appendonly=True)
        self.intent_path = write_intent_layer(self.cache / "soak" / f"intent-{MODEL}.json")
        self.launcher.configure(self._settings(self.redis.url))
        self.procs.env["LOCAL_FORUM_SESSION_KEY"] = self.session_key
        self.launcher.run("migrate", [*CITEBOT, "db", "migrate"])
        index_with(self.db_url, SAMPLE, EMBEDDER.vector, MODEL)
        models = self.launcher.start(
            "models",
            [sys.executable, "-m", "eval.soak.models", "--port", str(self.ports["models"]),
             "--llm-latency-ms", str(self.o.llm_latency_ms)],
        )  # fmt: skip
        self.launcher.on_stop(self.relay.close)
        self.launcher.thread(self.relay.app, port=self.ports["relay"], name="relay", lifespan="off")
        self.launcher.forum(
            self.ports["forum"],
            SAMPLE,
            self.forum_db_url,
            webhook_url=f"{self.relay_url}/hook",
            headers=self.admin_headers(),
            options=("--admin-api-reqs-per-minute", str(self.o.forum_api_limit)),
        )
        self.procs.wait_http(models, f"{self.models_url}/health")
        self.launcher.webhook(self.ports["webhook"])
        for name in FLAGS:
            r = self.http.put(
                f"{self.forum_url}/admin/site_settings/citebot_{name}.json",
                headers=self.admin_headers(),
                json={f"citebot_{name}": True},
            )
            r.raise_for_status()
        for i in range(1, self.o.workers + 1):
            self.start_worker(i)
        self.launcher.poller(self.o.poll_interval_s)
        self._supervising.set()
        self._supervisor.start()

    def _redis(self, work_dir: Path, *, appendonly: bool) -> RedisServer:
        return self.launcher.redis_server(work_dir, port=self.redis_port, appendonly=appendonly)

    def down(self) -> None:
        self._supervising.clear()
        if self._supervisor.is_alive():
            self._supervisor.join(150)
        self.launcher.stop()
        self.http.close()

    def _settings(self, redis_url: str) -> dict[str, Any]:
        o = self.o
        return {
            "database": {"url": self.db_url},
            # a killed worker's messages come back within seconds, not minutes
            "redis": {"url": redis_url, "namespace": NAMESPACE, "heartbeat_timeout_ms": 5000,
                      "maintenance_chance": 1000000},
            "discourse": {"base_url": self.forum_url, "api_key": self.api_key, "api_username": BOT,
                          "bot_username": BOT, "webhook_secret": self.secret,
                          "site_api_limit_per_minute": o.forum_api_limit,
                          "api_requests_per_minute": o.api_requests_per_minute, "api_burst": o.api_burst},
            "embeddings": {"provider": "tei", "base_url": self.models_url, "model": MODEL,
                           "dimension": DIMENSION},
            "reranker": {"base_url": self.models_url, "timeout_s": 10},
            "llm": {"base_url": self.models_url, "model": MODEL, "max_retries": 2, "timeout_s": 30},
            "flags": {"cache_ttl_s": 30},
            "gate": {"intent_path": str(self.intent_path)},
            # no rate limits in a soak; retries outlive the fault windows. A row untouched longer than
            # poll_stale_after_s (above max_backoff_s) has lost its message; the poller re-sends it.
            "limits": {"per_user_per_hour": 0, "per_topic_per_hour": 0, "max_retries": o.max_retries,
                       "min_backoff_s": 0.5, "max_backoff_s": 5, "poll_stale_after_s": 30},
        }  # fmt: skip

    def admin_headers(self) -> dict[str, str]:
        return {"Api-Key": self.api_key, "Api-Username": BOT}

    def member_headers(self, username: str) -> dict[str, str]:
        """A member's browser session (Discourse does not count it against the admin-API limit)."""
        return {"Api-Key": self.session_key, "Api-Username": username}

    def check_alive(self) -> None:
        """Raise when a service the supervisor does not restart (forum, model server) has died."""
        with self.lock:
            dead = [
                c
                for c in self.procs.children
                if c.proc.poll() is not None and not _supervised(c.name) and not _one_shot(c.name)
            ]
        if dead:
            names = ", ".join(f"{c.name} (code {c.proc.returncode})" for c in dead)
            raise SoakError(f"child exited: {names}; last lines of {dead[0].log}:\n{tail(dead[0].log)}")

    def _supervise(self) -> None:
        """Restart citebot processes that exit by themselves (compose: ``restart: unless-stopped``)."""
        while self._supervising.is_set():
            time.sleep(0.5)
            with self.lock:
                for child in [c for c in self.procs.children if c.proc.poll() is not None]:
                    base = child.name.split("-r")[0]
                    if not _supervised(base):
                        continue
                    lines = [ln for ln in tail(child.log, 40).splitlines() if ln.strip()]
                    self.crashes.append(
                        Crash(child.name, child.proc.returncode, time.time(), lines[-1] if lines else "")
                    )
                    self.procs.children.remove(child)
                    n = self.restarts[base] = self.restarts.get(base, 0) + 1
                    if base.startswith("worker-"):
                        self.workers.pop(int(base.split("-")[1]), None)
                        with contextlib.suppress(SoakError):  # seen again on the next pass
                            self.start_worker(int(base.split("-")[1]))
                    else:
                        argv = (
                            poller_argv(self.o.poll_interval_s)
                            if base == "poller"
                            else webhook_argv(self.ports["webhook"])
                        )
                        self.procs.start(f"{base}-r{n}", argv)

    # -- workers -----------------------------------------------------------------------------------

    def start_worker(self, index: int) -> Child:
        with self.lock:
            return self._start_worker(index)

    def _start_worker(self, index: int) -> Child:
        n = self.restarts.get(f"worker-{index}", 0)
        name = f"worker-{index}" + (f"-r{n}" if n else "")
        child = self.procs.start(name, worker_argv(self.o.threads))
        self.workers[index] = child
        deadline = time.monotonic() + 120
        while "worker started" not in tail(child.log, 200):
            if child.proc.poll() is not None or time.monotonic() > deadline:
                raise SoakError(f"{name} did not start:\n{tail(child.log)}")
            time.sleep(0.1)
        return child

    def kill_worker(self, index: int) -> None:
        """SIGKILL the worker's whole process group (as the OOM killer would), then start a new one."""
        with self.lock:
            self.launcher.kill(self.workers.pop(index), signal.SIGKILL)
            self.restarts[f"worker-{index}"] = self.restarts.get(f"worker-{index}", 0) + 1

    # -- the API backfill ----------------------------------------------------------------------------

    def start_backfill(self, name: str) -> Child:
        """``citebot backfill --source api`` (the scheduled incremental job) in the background."""
        return self.procs.start(name, [*CITEBOT, "backfill", "--source", "api"])

    def run_backfill(self, name: str, timeout_s: float = 600.0) -> str:
        return self.launcher.run(name, [*CITEBOT, "backfill", "--source", "api"], timeout_s=timeout_s)

    def kill_child(self, child: Child) -> None:
        self.launcher.kill(child, signal.SIGKILL)

    def vector_index_state(self) -> str:
        """``valid``, ``invalid`` or ``missing`` (the HNSW index recall reads), or ``unreadable``."""
        try:
            with psycopg.connect(self.db_url, connect_timeout=3) as conn:
                return index_state(conn)
        except psycopg.Error:
            return "unreadable"

    # -- Redis and PostgreSQL ----------------------------------------------------------------------

    def restart_redis(self, *, persistent: bool, down_s: float) -> None:
        """SIGKILL redis-server, then start one on the same port: the same AOF dir, or an empty one."""
        self.redis.kill()
        time.sleep(down_s)
        n = self.restarts["redis"] = self.restarts.get("redis", 0) + 1
        work = self.redis.work_dir if persistent else self.cache / "soak" / f"redis-mem-{n}"
        self.redis = self._redis(work, appendonly=persistent)

    def restart_postgres(self, *, down_s: float) -> None:
        """Stop the bot's PostgreSQL (fast shutdown: every connection is cut) and start it again."""
        self.pg.stop()
        time.sleep(down_s)
        url = self.pg.start()
        if with_database(url, "citebot_soak") != self.db_url:
            raise SoakError(f"PostgreSQL came back elsewhere: {url}")

    # -- fault knobs -------------------------------------------------------------------------------

    def forum_faults(self, **values: Any) -> None:
        for _ in range(50):
            try:
                r = self.http.post(
                    f"{self.forum_url}/__forum/faults", headers=self.admin_headers(), json=values
                )
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SoakError("the forum's fault knobs did not answer")

    def forum_calls(self, path: str) -> list[tuple[float, int]]:
        """(forum monotonic time, status) of every API request to ``path`` so far."""
        r = self.http.get(f"{self.forum_url}/__forum/api", headers=self.admin_headers())
        r.raise_for_status()
        return [(float(c[0]), int(c[2])) for c in r.json()["calls"] if c[4] == path]

    def model_faults(self, **values: Any) -> dict[str, Any]:
        r = self.http.post(f"{self.models_url}/__faults", json=values)
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data

    def forum_webhook_log(self) -> list[dict[str, Any]]:
        r = self.http.get(f"{self.forum_url}/__forum/webhooks", headers=self.admin_headers())
        r.raise_for_status()
        data: list[dict[str, Any]] = r.json()
        return data


def write_intent_layer(path: Path) -> Path:
    """The gate's intent layer for the soak's embedding model: the gate's exemplars embedded by the
    model double, so that the layer really needs the embedder. Its threshold is the top of the margin
    scale, so it never refuses a soak question; what the soak exercises is its embedding and fallback."""
    rows = [json.loads(line) for line in exemplars_text().splitlines() if line.strip()]
    harmful = [r for r in rows if r["label"] != BENIGN]
    benign = [r for r in rows if r["label"] == BENIGN]
    layer = IntentLayer(
        model=MODEL,
        harmful=[EMBEDDER.vector(r["text"]) for r in harmful],
        labels=[r["label"] for r in harmful],
        benign=[EMBEDDER.vector(r["text"]) for r in benign],
        k=3,
        threshold=2.0,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(layer.to_json()), "utf-8")
    return path


def _one_shot(name: str) -> bool:
    """A job a fault runs to its end or kills (the API backfill): neither restarted nor a crash."""
    return name.startswith("backfill")


def _supervised(name: str) -> bool:
    base = name.split("-r")[0]
    return base in ("poller", "webhook") or base.startswith("worker-")
