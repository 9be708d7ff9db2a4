"""``citebot poll``: the catch-up poller (questions whose webhook never arrived)."""

from __future__ import annotations

import argparse
import logging
import time

NAME = "poll"
HELP = "catch-up poller: enqueue mentions and replies that have no answer row"

log = logging.getLogger(__name__)


def register(group: argparse.ArgumentParser) -> None:
    group.add_argument("--once", action="store_true", help="one pass, then exit")
    group.add_argument("--interval", type=float, default=60.0, help="seconds between passes (default 60)")
    group.set_defaults(handler=_poll)


def _outages() -> tuple[type[BaseException], ...]:
    import dramatiq.errors
    import psycopg
    import psycopg_pool
    import redis

    return (redis.RedisError, psycopg.Error, psycopg_pool.PoolTimeout, dramatiq.errors.BrokerError, OSError)


def _poll(args: argparse.Namespace) -> int:
    from worker.actors import declare_actors, run_poll
    from worker.app.assemble import lazy_runtime
    from worker.app.commands.common import preflight, settings_from
    from worker.broker import build_broker
    from worker.errors import TransientError

    settings = settings_from(args)
    preflight(settings, redis=True)
    outages: tuple[type[BaseException], ...] = (TransientError, *_outages())
    broker = build_broker(settings.redis)
    provider = lazy_runtime(settings)
    actors = declare_actors(broker, provider, settings.limits)

    def enqueue(post_id: int, topic_id: int, version: int) -> None:
        actors.answer_question.send(post_id, topic_id, version, "poller")

    try:
        while True:
            try:
                report = run_poll(provider(), enqueue)
                print(
                    f"notifications {report.seen}, too old {report.too_old}, answered {report.answered}, "
                    f"not answered {report.not_answered}, held {report.held}, "
                    f"in progress {report.in_progress}, re-sent {report.resent}, "
                    f"in flight {report.in_flight}, not addressed {report.not_addressed}, "
                    f"enqueued {report.enqueued}",
                    flush=True,
                )
            except outages as exc:
                # Redis or PostgreSQL restarting, the forum down: the next pass tries again.
                if args.once:
                    raise
                log.warning("poll failed, will retry: %s: %s", type(exc).__name__, exc)
            if args.once:
                return 0
            time.sleep(args.interval)
    finally:
        broker.close()
        provider.close()
