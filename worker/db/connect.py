"""Opening connections to the citebot database, with errors mapped to ours."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector

from worker.errors import ConfigError, ServiceUnavailableError
from worker.settings import DatabaseSettings


def connect(
    settings: DatabaseSettings, *, autocommit: bool = False, vector: bool = True
) -> psycopg.Connection:
    """Open one connection; ``vector`` registers pgvector's types (needs the extension to exist)."""
    try:
        conn = psycopg.connect(
            settings.url, autocommit=autocommit, connect_timeout=max(1, int(settings.connect_timeout_s))
        )
    except psycopg.OperationalError as exc:
        raise ServiceUnavailableError(f"cannot connect: {first_line(exc)}", service="postgres") from exc
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid database URL: {first_line(exc)}", service="postgres") from exc
    if vector:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            # The extension is created by the first migration; before it, plain types are enough.
            conn.rollback()
    return conn


def first_line(exc: BaseException) -> str:
    """The first line of an exception message (libpq errors span several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
