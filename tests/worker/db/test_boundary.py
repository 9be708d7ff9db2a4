"""The one database error boundary (``worker.db.boundary``), and the call sites that go through it.

No database: a connection source that fails as psycopg fails when PostgreSQL is down is enough to
show each reader maps the failure the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg
import psycopg.errors
import pytest
from psycopg_pool import PoolClosed, PoolTimeout

from backfill.sources.db import DbSource
from worker.db import connect
from worker.db.boundary import database_errors, first_line
from worker.errors import (
    ConfigError,
    NotFoundError,
    ServiceUnavailableError,
    TransientError,
)
from worker.retrieval.excerpts import PostgresExcerptIndex
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex
from worker.retrieval.threads import PostgresThreadIndex
from worker.settings import DatabaseSettings, RetrievalSettings

LIBPQ = 'connection failed: connection to server at "127.0.0.1", port 1 failed\nIs the server running?'


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError(LIBPQ),
        psycopg.errors.AdminShutdown(LIBPQ),  # a server shutting down
        psycopg.errors.QueryCanceled(LIBPQ),  # statement_timeout
        psycopg.InterfaceError(LIBPQ),  # the connection is closed
        PoolTimeout(LIBPQ),
        PoolClosed(LIBPQ),
    ],
    ids=type,
)
def test_an_unreachable_database_is_service_unavailable_with_the_first_line_and_the_cause(
    error: psycopg.Error,
) -> None:
    with pytest.raises(ServiceUnavailableError) as caught, database_errors("post index unavailable"):
        raise error
    assert isinstance(caught.value, TransientError)
    assert caught.value.service == "postgres"
    assert caught.value.message == (
        'post index unavailable: connection failed: connection to server at "127.0.0.1", port 1 failed'
    )
    assert caught.value.__cause__ is error


def test_sql_and_constraint_errors_are_not_mapped() -> None:
    """A wrong statement is a bug, a unique violation a caller's decision: neither is "retry later"."""
    for error in (
        psycopg.errors.UndefinedColumn("column x does not exist"),
        psycopg.errors.UniqueViolation("duplicate key"),
        psycopg.errors.DataError("invalid input"),
    ):
        with pytest.raises(type(error)) as caught, database_errors("post index unavailable"):
            raise error
        assert caught.value is error


def test_a_table_not_there_yet_is_unavailable_only_where_the_caller_says_so() -> None:
    missing = psycopg.errors.UndefinedTable('relation "excerpt_vectors" does not exist')
    with pytest.raises(psycopg.errors.UndefinedTable), database_errors("excerpt column unavailable"):
        raise missing
    with (
        pytest.raises(
            ServiceUnavailableError,
            match=r'^postgres: excerpt column unavailable: relation "excerpt_vectors"',
        ),
        database_errors("excerpt column unavailable", unavailable=(psycopg.errors.UndefinedTable,)),
    ):
        raise missing


def test_a_programming_error_while_connecting_is_a_bad_url() -> None:
    bad = psycopg.ProgrammingError('invalid connection option "nope"')
    with (
        pytest.raises(
            ConfigError, match=r'^postgres: invalid database URL: invalid connection option "nope"'
        ),
        database_errors("cannot connect", connecting=True),
    ):
        raise bad
    with pytest.raises(psycopg.ProgrammingError), database_errors("cannot connect"):
        raise bad


def test_our_own_errors_and_other_exceptions_pass_through() -> None:
    ours = NotFoundError("no such post")
    with pytest.raises(NotFoundError) as caught, database_errors("post index unavailable"):
        raise ours
    assert caught.value is ours
    with pytest.raises(KeyError), database_errors("post index unavailable"):
        raise KeyError("x")


def test_the_service_is_named_by_the_caller() -> None:
    with (
        pytest.raises(ServiceUnavailableError) as caught,
        database_errors("cannot connect to the Discourse replica", service="discourse-db"),
    ):
        raise psycopg.OperationalError("timeout expired")
    assert str(caught.value) == "discourse-db: cannot connect to the Discourse replica: timeout expired"


def test_first_line() -> None:
    assert first_line(psycopg.OperationalError("a\nb")) == "a"
    assert first_line(psycopg.OperationalError("")) == "OperationalError"


# ---- the call sites: each reader maps a database that is down the same way ----


def _down(error: Exception) -> Callable[[], AbstractContextManager[psycopg.Connection]]:
    @contextmanager
    def borrow() -> Iterator[psycopg.Connection]:
        raise error
        yield  # pragma: no cover

    return borrow


VECTOR = [0.1] * 8
READS: dict[str, Callable[[Callable[[], AbstractContextManager[psycopg.Connection]]], object]] = {
    "recall": lambda c: PostgresPostIndex(c, RetrievalSettings(), model="m", dimension=8).recall(VECTOR, 5),
    "posts": lambda c: PostgresPostIndex(c, RetrievalSettings(), model="m", dimension=8).posts([1]),
    "neighbours": lambda c: PostgresPostIndex(c, RetrievalSettings(), model="m", dimension=8).neighbours(
        1, 2, 3
    ),
    "lexical search": lambda c: PostgresLexicalIndex(c, stats=lambda: None).search("how to install", 5),
    "lexical scores": lambda c: PostgresLexicalIndex(c, stats=lambda: None).scores([("install", 1.0)], [1]),
    "thread": lambda c: PostgresThreadIndex(c).posts_of(VECTOR, [1]),
}


@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize(
    "error",
    [
        PoolTimeout("couldn't get a connection after 5.00 sec"),
        psycopg.InterfaceError("the connection is closed"),
    ],
    ids=type,
)
def test_every_post_index_read_maps_a_database_that_is_down_to_service_unavailable(
    read: str, error: Exception
) -> None:
    with pytest.raises(ServiceUnavailableError) as caught:
        READS[read](_down(error))
    assert caught.value.service == "postgres"
    assert caught.value.message == f"post index unavailable: {error}"
    assert caught.value.__cause__ is error


def test_the_excerpt_reader_maps_a_database_down_and_a_missing_table() -> None:
    for error in (PoolTimeout("pool timeout"), psycopg.errors.UndefinedTable("no excerpt_vectors")):
        index = PostgresExcerptIndex(_down(error), model="m", dimension=8)
        with pytest.raises(
            ServiceUnavailableError, match=rf"^postgres: excerpt column unavailable: {error}$"
        ):
            index.cosines(VECTOR, [1])


def test_opening_a_connection_maps_a_refused_server_and_a_bad_url() -> None:
    with pytest.raises(ServiceUnavailableError, match=r"^postgres: cannot connect: "):
        connect.connect(DatabaseSettings(url="postgresql://u@127.0.0.1:1/db", connect_timeout_s=1))
    with pytest.raises(ConfigError, match=r"^postgres: invalid database URL: "):
        connect.connect(DatabaseSettings(url="postgresql://u@127.0.0.1:1/db?nope=1"))


def test_the_replica_source_maps_a_refused_server_to_service_unavailable() -> None:
    source = DbSource("postgresql://u@127.0.0.1:1/discourse", connect_timeout_s=1)
    with pytest.raises(ServiceUnavailableError) as caught:
        source.categories()
    assert caught.value.service == "discourse-db"
    assert caught.value.message.startswith("cannot connect to the Discourse replica: ")
