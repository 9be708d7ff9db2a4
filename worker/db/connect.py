"""Opening connections to the citebot database, with errors mapped to ours (``worker.db.boundary``)."""

from __future__ import annotations

import threading
import time
import weakref

import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from worker.db.boundary import database_errors
from worker.errors import ServiceUnavailableError
from worker.settings import DatabaseSettings


def connect(
    settings: DatabaseSettings, *, autocommit: bool = False, vector: bool = True
) -> psycopg.Connection:
    """Open one connection; ``vector`` registers pgvector's types (needs the extension to exist)."""
    with database_errors("cannot connect", connecting=True):
        conn = psycopg.connect(
            settings.url, autocommit=autocommit, connect_timeout=max(1, int(settings.connect_timeout_s))
        )
    if vector:
        try:
            register_vector(conn)
        except psycopg.ProgrammingError:
            # The extension is created by the first migration; before it, plain types are enough.
            conn.rollback()
    return conn


def configure_connection(conn: psycopg.Connection) -> None:
    """Per-connection set-up of every pooled connection: pgvector's types (vector, halfvec)."""
    register_vector(conn)
    conn.commit()


# A connection handed out this recently is not checked again at checkout (HikariCP's "alive bypass
# window" is the same 0.5 s): in a busy worker the check was one round trip before every statement (a
# recall: 2 instead of 1, issue 18), while a connection a PostgreSQL restart broke is still replaced at
# the next checkout after a pause, and within the window the statement fails and the job is retried.
CHECK_BYPASS_S = 0.5
_HANDED_OUT: weakref.WeakKeyDictionary[psycopg.Connection, float] = weakref.WeakKeyDictionary()
_HANDED_OUT_LOCK = threading.Lock()


def check_connection(conn: psycopg.Connection) -> None:
    """The pool's checkout check: psycopg_pool's (a round trip; a broken connection raises and is
    replaced) unless ``conn`` was handed out less than ``CHECK_BYPASS_S`` ago."""
    now = time.monotonic()
    with _HANDED_OUT_LOCK:
        last = _HANDED_OUT.get(conn)
    if last is None or now - last >= CHECK_BYPASS_S:
        ConnectionPool.check_connection(conn)
    with _HANDED_OUT_LOCK:
        _HANDED_OUT[conn] = now


def open_pool(
    settings: DatabaseSettings, *, min_size: int = 1, max_size: int | None = None
) -> ConnectionPool:
    """A connection pool whose connections know pgvector's types; opened (and checked) now."""
    pool = ConnectionPool(
        settings.url,
        min_size=min_size,
        max_size=max_size or settings.pool_size,
        kwargs={"connect_timeout": max(1, int(settings.connect_timeout_s))},
        configure=configure_connection,
        # A connection broken by a PostgreSQL restart is replaced at checkout instead of failing a job.
        check=check_connection,
        open=False,
    )
    try:
        with database_errors("cannot open a connection pool"):
            pool.open(wait=True, timeout=max(2.0, settings.connect_timeout_s * 2))
    except ServiceUnavailableError:
        pool.close()
        raise
    return pool
