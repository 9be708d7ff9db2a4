"""``citebot worker run``: a dramatiq worker running citebot's actors in this process."""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.runtime import Runtime

NAME = "worker"
HELP = "queue worker: run"

log = logging.getLogger(__name__)

# docs/intake.md: dramatiq's default 1 s poll adds ~0.4 s to an idle worker's first job; 100 ms → ~40 ms.
WORKER_TIMEOUT_MS = 100


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="worker_command", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("run", help="consume the questions, index and maintenance queues until stopped")
    p.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes (default 1): this one plus N-1 children, stopped together",
    )
    p.add_argument("--queues", nargs="*", default=None, help="only these queues (default: all)")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics on this port (default CITEBOT_METRICS_PORT; children use port+i)",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import dramatiq

    from worker.actors import declare_actors
    from worker.app.assemble import build_answerer, lazy_runtime
    from worker.app.commands.common import preflight, settings_from
    from worker.broker import build_broker
    from worker.errors import ConfigError

    settings = settings_from(args)
    if args.processes < 1:
        raise ConfigError("--processes must be at least 1")
    # Before anything starts: the database migrated, the index's model the configured one, Redis up.
    preflight(settings, redis=True)
    metrics_port = args.metrics_port or settings.metrics_port
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr="0.0.0.0")  # noqa: S104 - scraped from outside the pod
        log.info("metrics on :%d/metrics", metrics_port)
    broker = build_broker(settings.redis)
    runtime = lazy_runtime(settings, answerer_factory=build_answerer)
    # Build the pipeline now: a broken rules file, an unreachable database or a model that does not
    # match the index stops the worker at start with a clear message, not message by message.
    rt = runtime()
    # A key that may not read the site settings (401/403) stops the worker here, before any child
    # starts; a forum that is down only delays the flags (questions are held until they are read).
    from worker.flags import check_access

    try:
        check_access(rt.forum.at("background").get_site_settings, settings.flags)
    except ConfigError:
        broker.close()
        runtime.close()
        raise
    children = [
        _spawn_child(args, metrics_port + i if metrics_port else None) for i in range(1, args.processes)
    ]
    if metrics_port:
        _register_backlog(rt)
    actors = declare_actors(broker, runtime, settings.limits)
    # The forum's webhooks send every event the index follows? Warned here, never fatal.
    from worker.webhook_check import check_webhook_events

    check_webhook_events(rt.forum.at("background").get_web_hooks)
    # Categories created or changed while no worker ran are recorded before questions need them.
    actors.sync_categories.send()
    worker = dramatiq.Worker(
        broker,
        queues=set(args.queues) if args.queues else None,
        worker_timeout=WORKER_TIMEOUT_MS,
        worker_threads=args.threads,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.start()
    log.info("worker started: %d thread(s)", args.threads)
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        for child in children:
            child.terminate()
        worker.stop()
        broker.close()
        runtime.close()
        for child in children:
            child.wait(30)
    return 0


def _register_backlog(rt: Runtime) -> None:
    """Queue depth and age, dead letters and the index's size on this process's /metrics."""
    from prometheus_client import REGISTRY

    from worker.actors import INDEX_QUEUE, MAINTENANCE_QUEUE, QUESTIONS_QUEUE
    from worker.backlog import BacklogCollector

    queues = (QUESTIONS_QUEUE, INDEX_QUEUE, MAINTENANCE_QUEUE)
    namespace = f"{rt.settings.redis.namespace}-tasks"  # worker.broker.build_broker's
    REGISTRY.register(BacklogCollector(rt.redis, namespace, queues, rt.pool.connection))


def _spawn_child(args: argparse.Namespace, metrics_port: int | None) -> subprocess.Popen[bytes]:
    """One more worker process with the same options (it inherits the environment, hence the settings)."""
    command = [sys.executable, "-m", "worker.app.cli", "worker", "run", "--threads", str(args.threads)]
    if metrics_port:
        command += ["--metrics-port", str(metrics_port)]
    if args.queues:
        command += ["--queues", *args.queues]
    return subprocess.Popen(command)  # noqa: S603 - our own CLI, no shell
