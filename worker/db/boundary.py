"""The one mapping of database failures to our error types, as ``worker.clients.http`` is for HTTP.

Every read or write that should turn a database failure into one of ours runs inside
``database_errors(what)``; the call sites keep only what is theirs (the statement, what a row means,
the words of ``what``). A failure means the same thing wherever it happens:

=============================================  ===========================  =========
psycopg failure                                our error                    retried
=============================================  ===========================  =========
``OperationalError``: refused, lost or shut    ``ServiceUnavailableError``  yes
down connection, statement timeout, the
pool's ``PoolTimeout`` and ``PoolClosed``
``InterfaceError``: a closed connection        ``ServiceUnavailableError``  yes
one of ``unavailable`` (the caller's: e.g.     ``ServiceUnavailableError``  yes
``UndefinedTable`` for an optional table)
``ProgrammingError`` while ``connecting``      ``ConfigError``              no
(an unreadable database URL)
anything else (SQL errors, constraint          not mapped: raised as is     no
violations, data errors)
=============================================  ===========================  =========

The message is ``"{what}: {first line of libpq's message}"`` (libpq's messages span several lines and
never carry a query's parameters); the psycopg exception stays the ``__cause__``. An error that is
already ours passes through untouched.

Places that *degrade* rather than fail (a metrics gauge, a cached statistic that keeps its last value)
catch ``psycopg.Error`` themselves: that is a fallback, not a mapping.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from worker.errors import ConfigError, ServiceUnavailableError

SERVICE = "postgres"

# What a database that is down, restarting or unreachable raises (psycopg_pool's errors included).
UNAVAILABLE: tuple[type[psycopg.Error], ...] = (psycopg.OperationalError, psycopg.InterfaceError)


@contextmanager
def database_errors(
    what: str,
    *,
    service: str = SERVICE,
    unavailable: tuple[type[psycopg.Error], ...] = (),
    connecting: bool = False,
) -> Iterator[None]:
    """Run the block; raise our error for a database failure in it (the table in the module docstring).

    ``what`` says what could not be done or reached ("post index unavailable", "cannot connect");
    ``unavailable`` adds psycopg errors that mean "not there yet" at this call site; ``connecting``
    marks a block that opens a connection, where a ``ProgrammingError`` is a bad URL.
    """
    try:
        yield
    except (*UNAVAILABLE, *unavailable) as exc:
        raise ServiceUnavailableError(f"{what}: {first_line(exc)}", service=service) from exc
    except psycopg.ProgrammingError as exc:
        if not connecting:
            raise
        raise ConfigError(f"invalid database URL: {first_line(exc)}", service=service) from exc


def first_line(exc: BaseException) -> str:
    """The first line of an exception message (libpq errors span several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
