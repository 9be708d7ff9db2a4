"""The soak's stack on loopback: every service a child process (or a thread here), each one restartable.

Two PostgreSQL servers: the bot's (restarted by the PostgreSQL fault) and the forum's (Discourse has its
own database; restarting the bot's must not take the forum down with it).
"""

from __future__ import annotations

import contextlib
import json
import os
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
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from eval.soak.models import DIMENSION, EMBEDDER, MODEL
from eval.soak.relay import StormRelay, ThreadServer
from eval.stack.postgres import EmbeddedPostgres, ensure_database, with_database
from eval.stack.procs import CITEBOT, Child, Processes, tail
from eval.stack.redis import RedisServer, free_port
from worker.html_text import html_to_text
from worker.webhook import WEBHOOK_PATH

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "eval" / "data" / "urho3d-sample"
BOT = "citebot"
NAMESPACE = "citebot-soak"
FLAGS = ("enabled", "posts_pipeline", "input_gate", "rerank", "post_links")


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
        self.webhook_url = f"http://127.0.0.1:{self.ports['webhook']}{WEBHOOK_PATH}"
        self.pg = EmbeddedPostgres(self.cache / "soak-pg")
        self.forum_pg = EmbeddedPostgres(self.cache / "soak-forum-pg")
        self.redis_port = free_port()
        self.redis = RedisServer(self.cache / "soak" / "redis-aof", port=self.redis_port, appendonly=True)
        self.procs = Processes(self.logs, _base_env())
        self.relay = StormRelay(self.webhook_url, seed=options.seed)
        self.relay_server = ThreadServer(self.relay.app, self.ports["relay"])
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
        server = self.pg.start()
        self.db_url = ensure_database(server, "citebot_soak", fresh=True)
        self.forum_db_url = ensure_database(self.forum_pg.start(), "citebot_soak_forum", fresh=True)
        redis_url = self.redis.start()
        self.procs.env.update(self._env(redis_url))
        self.procs.run("migrate", [*CITEBOT, "db", "migrate"])
        index_sample(self.db_url, SAMPLE)
        models = self.procs.start(
            "models",
            [sys.executable, "-m", "eval.soak.models", "--port", str(self.ports["models"]),
             "--llm-latency-ms", str(self.o.llm_latency_ms)],
        )  # fmt: skip
        self.relay_server.start()
        forum = self.procs.start(
            "forum",
            [*CITEBOT, "forum", "serve", "--export", str(SAMPLE), "--port", str(self.ports["forum"]),
             "--database-url", self.forum_db_url, "--webhook-url", f"{self.relay_server.url}/hook",
             "--reload", "--admin-api-reqs-per-minute", str(self.o.forum_api_limit)],
        )  # fmt: skip
        self.procs.wait_http(models, f"{self.models_url}/health")
        self.procs.wait_http(
            forum,
            f"{self.forum_url}/admin/site_settings.json?plugin=citebot",
            headers=self.admin_headers(),
            timeout_s=180,
        )
        webhook = self.procs.start(
            "webhook", [*CITEBOT, "webhook", "serve", "--port", str(self.ports["webhook"])]
        )
        self.procs.wait_http(webhook, f"http://127.0.0.1:{self.ports['webhook']}/readyz")
        for name in FLAGS:
            r = self.http.put(
                f"{self.forum_url}/admin/site_settings/citebot_{name}.json",
                headers=self.admin_headers(),
                json={f"citebot_{name}": True},
            )
            r.raise_for_status()
        for i in range(1, self.o.workers + 1):
            self.start_worker(i)
        self.procs.start("poller", self._poller_argv())
        self._supervising.set()
        self._supervisor.start()

    def _poller_argv(self) -> list[str]:
        return [*CITEBOT, "poll", "--interval", str(self.o.poll_interval_s)]

    def _webhook_argv(self) -> list[str]:
        return [*CITEBOT, "webhook", "serve", "--port", str(self.ports["webhook"])]

    def down(self) -> None:
        self._supervising.clear()
        if self._supervisor.is_alive():
            self._supervisor.join(150)
        with contextlib.suppress(Exception):
            self.procs.stop_all()
        with contextlib.suppress(Exception):
            self.relay_server.stop()
        with contextlib.suppress(Exception):
            self.relay.close()
        with contextlib.suppress(Exception):
            self.redis.stop()
        for pg in (self.pg, self.forum_pg):
            with contextlib.suppress(Exception):
                pg.stop()
        self.http.close()

    def _env(self, redis_url: str) -> dict[str, str]:
        return {
            "CITEBOT_DATABASE__URL": self.db_url,
            "CITEBOT_REDIS__URL": redis_url,
            "CITEBOT_REDIS__NAMESPACE": NAMESPACE,
            # a killed worker's messages come back within seconds, not minutes
            "CITEBOT_REDIS__HEARTBEAT_TIMEOUT_MS": "5000",
            "CITEBOT_REDIS__MAINTENANCE_CHANCE": "1000000",
            "CITEBOT_DISCOURSE__BASE_URL": self.forum_url,
            "CITEBOT_DISCOURSE__API_KEY": self.api_key,
            "CITEBOT_DISCOURSE__API_USERNAME": BOT,
            "CITEBOT_DISCOURSE__BOT_USERNAME": BOT,
            "CITEBOT_DISCOURSE__WEBHOOK_SECRET": self.secret,
            "CITEBOT_DISCOURSE__SITE_API_LIMIT_PER_MINUTE": str(self.o.forum_api_limit),
            "CITEBOT_DISCOURSE__API_REQUESTS_PER_MINUTE": str(self.o.api_requests_per_minute),
            "CITEBOT_DISCOURSE__API_BURST": str(self.o.api_burst),
            "LOCAL_FORUM_SESSION_KEY": self.session_key,
            "CITEBOT_EMBEDDINGS__PROVIDER": "tei",
            "CITEBOT_EMBEDDINGS__BASE_URL": self.models_url,
            "CITEBOT_EMBEDDINGS__MODEL": MODEL,
            "CITEBOT_EMBEDDINGS__DIMENSION": str(DIMENSION),
            "CITEBOT_RERANKER__BASE_URL": self.models_url,
            "CITEBOT_RERANKER__TIMEOUT_S": "10",
            "CITEBOT_LLM__BASE_URL": self.models_url,
            "CITEBOT_LLM__MODEL": MODEL,
            "CITEBOT_LLM__MAX_RETRIES": "2",
            "CITEBOT_LLM__TIMEOUT_S": "30",
            "CITEBOT_FLAGS__CACHE_TTL_S": "30",
            # no rate limits in a soak; retries outlive the fault windows
            "CITEBOT_LIMITS__PER_USER_PER_HOUR": "0",
            "CITEBOT_LIMITS__PER_TOPIC_PER_HOUR": "0",
            "CITEBOT_LIMITS__MAX_RETRIES": str(self.o.max_retries),
            "CITEBOT_LIMITS__MIN_BACKOFF_S": "0.5",
            "CITEBOT_LIMITS__MAX_BACKOFF_S": "5",
            # Above MAX_BACKOFF_S: a row untouched this long has lost its message; the poller re-sends it.
            "CITEBOT_LIMITS__POLL_STALE_AFTER_S": "30",
        }

    def admin_headers(self) -> dict[str, str]:
        return {"Api-Key": self.api_key, "Api-Username": BOT}

    def member_headers(self, username: str) -> dict[str, str]:
        """A member's browser session (Discourse does not count it against the admin-API limit)."""
        return {"Api-Key": self.session_key, "Api-Username": username}

    def check_alive(self) -> None:
        """Raise when a service the supervisor does not restart (forum, model server) has died."""
        with self.lock:
            dead = [c for c in self.procs.children if c.proc.poll() is not None and not _supervised(c.name)]
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
                        argv = self._poller_argv() if base == "poller" else self._webhook_argv()
                        self.procs.start(f"{base}-r{n}", argv)

    # -- workers -----------------------------------------------------------------------------------

    def start_worker(self, index: int) -> Child:
        with self.lock:
            return self._start_worker(index)

    def _start_worker(self, index: int) -> Child:
        n = self.restarts.get(f"worker-{index}", 0)
        name = f"worker-{index}" + (f"-r{n}" if n else "")
        child = self.procs.start(name, [*CITEBOT, "worker", "run", "--threads", str(self.o.threads)])
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
            child = self.workers.pop(index)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.proc.pid, signal.SIGKILL)
            child.proc.wait(30)
            self.procs.children.remove(child)
            self.restarts[f"worker-{index}"] = self.restarts.get(f"worker-{index}", 0) + 1

    # -- Redis and PostgreSQL ----------------------------------------------------------------------

    def restart_redis(self, *, persistent: bool, down_s: float) -> None:
        """SIGKILL redis-server, then start one on the same port: the same AOF dir, or an empty one."""
        self.redis.kill()
        time.sleep(down_s)
        n = self.restarts["redis"] = self.restarts.get("redis", 0) + 1
        work = self.redis.work_dir if persistent else self.cache / "soak" / f"redis-mem-{n}"
        self.redis = RedisServer(work, port=self.redis_port, appendonly=persistent)
        self.redis.start()

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


def index_sample(db_url: str, export: Path) -> int:
    """Fill post_index from the export with the fake TEI's vectors (what a backfill would write)."""
    rows = 0
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        for path in sorted((export / "topics").glob("*.json")):
            topic = json.loads(path.read_text("utf-8"))
            for post in topic["post_stream"]["posts"]:
                text = html_to_text(post["cooked"])
                conn.execute(
                    "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title,"
                    " category_id, text, digest, model, embedding)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, '\\x00', %s, %s) ON CONFLICT DO NOTHING",
                    (
                        post["id"], topic["id"], post["post_number"], topic["slug"], topic["title"],
                        topic["category_id"], text, MODEL,
                        HalfVector(EMBEDDER.vector(f"{topic['title']}\n{text}")),
                    ),
                )  # fmt: skip
                rows += 1
    return rows


def _supervised(name: str) -> bool:
    base = name.split("-r")[0]
    return base in ("poller", "webhook") or base.startswith("worker-")


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")}
    env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env
