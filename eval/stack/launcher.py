"""The one stack launcher: how the demo, the soak, the eval and the tests bring services up and down.

A ``Launcher`` starts what a stack needs and stops every one of it, newest first, on success, on
failure and on Ctrl-C alike:

- PostgreSQL + pgvector (``postgres``: a given server, or the embedded one in a data folder);
- Redis (``redis``: a given URL, the shared one on 6379, or a ``redis-server`` of its own);
- ASGI apps in this process (``thread``: the forum double, the model server, a test's fake);
- child processes (``start``, ``serve``, ``run``; ``worker``, ``webhook``, ``poller``, ``forum``), each
  in its own process group with its output in ``logs/NAME.log`` (``eval.stack.procs``).

``citebot_env`` is the one mapping from settings (nested as in ``worker.settings``) to the
``CITEBOT_…`` variables a child process reads; ``index_with`` fills the post index of a stack whose
embedder is a deterministic fake (what a backfill would write, without a model).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import psycopg
import uvicorn
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from eval.stack.postgres import EmbeddedPostgres
from eval.stack.procs import CITEBOT, Child, DemoError, Processes, tail
from eval.stack.redis import RedisServer, free_port, redis_answers
from worker.html_text import html_to_text
from worker.settings import ENV_DELIMITER, ENV_PREFIX
from worker.webhook_events import WEBHOOK_PATH

Lifespan = Literal["auto", "on", "off"]


class AppThread:
    """An ASGI app served by uvicorn on 127.0.0.1 (a free port unless given), in a daemon thread."""

    def __init__(
        self, app: Any, *, port: int | None = None, name: str = "app", lifespan: Lifespan = "auto"
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, access_log=False, lifespan=lifespan
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=f"{name}-{self.port}", daemon=True)

    def start(self, timeout_s: float = 30.0) -> str:
        """Start serving; returns the base URL once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self._thread.name} did not start on {self.url}")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)

    def __enter__(self) -> AppThread:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextmanager
def serve(app: Any, *, lifespan: Lifespan = "on") -> Iterator[str]:
    """Serve ``app`` in a thread until the block ends; yields its base URL."""
    with AppThread(app, lifespan=lifespan) as server:
        yield server.url


def citebot_env(values: Mapping[str, Any]) -> dict[str, str]:
    """``{"database": {"url": u}, "log_level": "INFO"}`` → ``{"CITEBOT_DATABASE__URL": u, …}``."""
    env: dict[str, str] = {}
    for key, value in values.items():
        name = f"{ENV_PREFIX}{key.upper()}"
        if isinstance(value, Mapping):
            for sub, inner in citebot_env(value).items():
                env[f"{name}{ENV_DELIMITER}{sub.removeprefix(ENV_PREFIX)}"] = inner
        elif value is not None:
            env[name] = _env_text(value)
    return env


def _env_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def base_env(keep: Iterable[str] = ()) -> dict[str, str]:
    """The caller's environment without its citebot settings (except prefixes in ``keep``), models
    offline, output unbuffered: what every child starts from."""
    prefixes = tuple(keep)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(ENV_PREFIX) or (prefixes and k.startswith(prefixes))
    }
    env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return env


class Launcher:
    """Starts the services of one stack, waits until each answers, and stops every one of them."""

    def __init__(self, logs: Path, env: Mapping[str, str] | None = None) -> None:
        self.procs = Processes(logs, base_env() if env is None else env)
        self._stops: list[Callable[[], None]] = []

    @property
    def env(self) -> dict[str, str]:
        """The environment of every child started from now on (``configure`` adds settings to it)."""
        return self.procs.env

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Add citebot settings (nested as in ``worker.settings``) to the children's environment."""
        self.procs.env.update(citebot_env(settings))

    def on_stop(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the stack stops (newest first)."""
        self._stops.append(stop)

    # -- services ----------------------------------------------------------------------------------

    def postgres(self, data_dir: Path, *, url: str | None = None, keep_running: bool = False) -> str:
        """``url`` when given; else the embedded server in ``data_dir`` (stopped with the stack unless
        ``keep_running``). Returns the URL of the server's ``postgres`` database."""
        if url:
            return url
        return self.embedded_postgres(data_dir, keep_running=keep_running).url or ""

    def embedded_postgres(self, data_dir: Path, *, keep_running: bool = False) -> EmbeddedPostgres:
        """The embedded server in ``data_dir``, started, for a caller that restarts it (the soak) or
        decides late whether it outlives the stack (the demo's ``--keep``)."""
        server = EmbeddedPostgres(data_dir, keep_running=keep_running)
        server.start()
        self.on_stop(lambda: server.stop())
        return server

    def redis(
        self, work_dir: Path, *, url: str | None = None, shared: str | None = None, appendonly: bool = False
    ) -> str:
        """``url`` when given; else ``shared`` when a Redis answers there; else a ``redis-server`` of
        the stack's own in ``work_dir`` on a free port. Returns its URL."""
        if url:
            return url
        if shared is not None and redis_answers(shared):
            return shared
        return self.redis_server(work_dir, appendonly=appendonly).url

    def redis_server(
        self, work_dir: Path, *, port: int | None = None, appendonly: bool = False
    ) -> RedisServer:
        """A ``redis-server`` of the stack's own, started (the soak kills and restarts it)."""
        server = RedisServer(work_dir, port=port, appendonly=appendonly)
        server.start()
        self.on_stop(server.stop)
        return server

    def thread(
        self, app: Any, *, port: int | None = None, name: str = "app", lifespan: Lifespan = "auto"
    ) -> str:
        """Serve an ASGI app in this process; returns its base URL."""
        server = AppThread(app, port=port, name=name, lifespan=lifespan)
        url = server.start()
        self.on_stop(server.stop)
        return url

    # -- child processes ---------------------------------------------------------------------------

    def start(self, name: str, argv: Sequence[str]) -> Child:
        """A long-running child, not waited for."""
        return self.procs.start(name, argv)

    def run(self, name: str, argv: Sequence[str], **kwargs: Any) -> str:
        """A child run to completion (``Processes.run``); returns its output."""
        return self.procs.run(name, argv, **kwargs)

    def serve(
        self,
        name: str,
        argv: Sequence[str],
        ready: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 120.0,
    ) -> Child:
        """A long-running child that is ready once ``ready`` answers 200."""
        child = self.procs.start(name, argv)
        self.procs.wait_http(child, ready, headers=headers, timeout_s=timeout_s)
        return child

    def wait_log(self, child: Child, text: str, *, timeout_s: float = 120.0) -> None:
        """Wait until ``text`` appears in the child's log; fail early when any child exits."""
        deadline = time.monotonic() + timeout_s
        while text not in tail(child.log, 200):
            self.procs.check_alive()
            if time.monotonic() > deadline:
                raise DemoError(f"{child.name} did not log {text!r} within {timeout_s:.0f} s", child.log)
            time.sleep(0.1)

    def forum(
        self,
        port: int,
        export: Path,
        database_url: str,
        *,
        webhook_url: str,
        headers: Mapping[str, str],
        options: Sequence[str] = (),
        timeout_s: float = 180.0,
    ) -> Child:
        """``citebot forum serve`` loaded with ``export`` (reloaded on every start)."""
        argv = [
            *CITEBOT, "forum", "serve", "--export", str(export), "--port", str(port),
            "--database-url", database_url, "--webhook-url", webhook_url, "--reload", *options,
        ]  # fmt: skip
        ready = f"http://127.0.0.1:{port}/admin/site_settings.json?plugin=citebot"
        return self.serve("forum", argv, ready, headers=headers, timeout_s=timeout_s)

    def webhook(self, port: int, *, name: str = "webhook") -> Child:
        """``citebot webhook serve``, ready once ``/readyz`` answers."""
        return self.serve(name, webhook_argv(port), f"http://127.0.0.1:{port}/readyz")

    def worker(self, name: str = "worker", *, threads: int = 2, timeout_s: float = 120.0) -> Child:
        """``citebot worker run``, ready once it logs that it started."""
        child = self.procs.start(name, worker_argv(threads))
        self.wait_log(child, "worker started", timeout_s=timeout_s)
        return child

    def poller(self, interval_s: float, *, name: str = "poller") -> Child:
        return self.procs.start(name, poller_argv(interval_s))

    def kill(self, child: Child, sig: int) -> None:
        """Signal the child's process group (SIGKILL: as the OOM killer would) and forget it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.proc.pid, sig)
        child.proc.wait(60)
        if child in self.procs.children:
            self.procs.children.remove(child)

    # -- down ----------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the children (newest first), then every service, newest first; errors are not raised."""
        with contextlib.suppress(Exception):
            self.procs.stop_all()
        while self._stops:
            with contextlib.suppress(Exception):
                self._stops.pop()()

    def __enter__(self) -> Launcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def worker_argv(threads: int) -> list[str]:
    return [*CITEBOT, "worker", "run", "--threads", str(threads)]


def webhook_argv(port: int) -> list[str]:
    return [*CITEBOT, "webhook", "serve", "--port", str(port)]


def poller_argv(interval_s: float) -> list[str]:
    return [*CITEBOT, "poll", "--interval", str(interval_s)]


def webhook_url(port: int) -> str:
    return f"http://127.0.0.1:{port}{WEBHOOK_PATH}"


def index_with(
    db_url: str,
    export: Path,
    vector: Callable[[str], Sequence[float]],
    model: str,
    *,
    restricted: Iterable[int] = (),
) -> int:
    """Fill ``post_index`` from an export with ``vector(title + "\\n" + text)``: what a backfill with
    that embedder would write, for stacks whose embedder is a deterministic fake. The export's
    categories are recorded as the forum describes them (public, but those in ``restricted``), as a
    backfill of the live forum would (``backfill.categories``). Returns the rows."""
    rows = 0
    restricted = set(restricted)
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        for path in sorted((export / "topics").glob("*.json")):
            topic = json.loads(path.read_text("utf-8"))
            if topic.get("category_id") is not None:
                conn.execute(
                    "INSERT INTO categories (category_id, read_restricted, seen_by) VALUES (%s, %s, 'api')"
                    " ON CONFLICT (category_id) DO NOTHING",
                    (topic["category_id"], topic["category_id"] in restricted),
                )
            for post in topic["post_stream"]["posts"]:
                text = html_to_text(post["cooked"])
                conn.execute(
                    "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title,"
                    " category_id, text, digest, model, embedding)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, '\\x00', %s, %s) ON CONFLICT DO NOTHING",
                    (
                        post["id"], topic["id"], post["post_number"], topic["slug"], topic["title"],
                        topic["category_id"], text, model,
                        HalfVector(list(vector(f"{topic['title']}\n{text}"))),
                    ),
                )  # fmt: skip
                rows += 1
    return rows
