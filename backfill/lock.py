"""Two backfills of one source never run at once: a session advisory lock, tried, never waited for.

Each run holds, on a dedicated connection for its whole life, an exclusive lock on its source key and a
SHARED lock on the backfill namespace; a bulk load (``--bulk``, ``--reindex``, a load into an empty
table) takes that namespace lock EXCLUSIVELY, so it runs alone: nothing builds the vector index while it
has it dropped. The second run does not wait (an operator would rather know at once): it exits with a message
naming the process that holds the lock. The locks vanish with the session if the process dies.
"""

from __future__ import annotations

import contextlib
import zlib
from types import TracebackType

import psycopg

from worker.errors import PermanentError

NAMESPACE = 0x43424631  # "CBF1": the classid of every backfill advisory lock


class BackfillBusyError(PermanentError):
    """Another backfill holds the lock this run needs."""


def source_lock_id(source_key: str) -> int:
    """A stable signed 32-bit id for a source key."""
    value = zlib.crc32(source_key.encode()) & 0x7FFFFFFF
    return value or 1  # 0 is the namespace-wide lock


class BackfillLock:
    """Context manager holding the run's advisory locks on its own autocommit connection."""

    def __init__(self, url: str, source_key: str, *, exclusive: bool = False) -> None:
        self.url = url
        self.source_key = source_key
        self.exclusive = exclusive
        self._conn: psycopg.Connection | None = None

    def __enter__(self) -> BackfillLock:
        conn = psycopg.connect(self.url, autocommit=True)
        self._conn = conn
        try:
            fn = "pg_try_advisory_lock" if self.exclusive else "pg_try_advisory_lock_shared"
            if not _try(conn, fn, 0):
                holder = _holder(conn, 0)
                what = "a backfill" if self.exclusive else "a bulk load (--bulk or --reindex)"
                raise BackfillBusyError(
                    f"{what} is running{holder}; wait for it to finish (or stop it) and run again",
                    service="backfill",
                )
            if not _try(conn, "pg_try_advisory_lock", source_lock_id(self.source_key)):
                raise BackfillBusyError(
                    f"another backfill of source {self.source_key!r} is running"
                    f"{_holder(conn, source_lock_id(self.source_key))}; this run changed nothing",
                    service="backfill",
                )
        except BaseException:
            conn.close()
            self._conn = None
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._conn is not None:
            # Unlock explicitly: closing only asks the backend to exit, and a run started right after
            # could still find the locks held by the exiting backend.
            with contextlib.suppress(psycopg.Error):  # a dead session has released them already
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            self._conn.close()
            self._conn = None


def _try(conn: psycopg.Connection, fn: str, objid: int) -> bool:
    row = conn.execute(f"SELECT {fn}(%s, %s)", (NAMESPACE, objid)).fetchone()
    return bool(row and row[0])


def _holder(conn: psycopg.Connection, objid: int) -> str:
    row = conn.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::bigint = %s AND objid::bigint = %s AND pid <> pg_backend_pid() LIMIT 1",
        (NAMESPACE, objid),
    ).fetchone()
    return f" (PostgreSQL backend pid {row[0]})" if row else ""
