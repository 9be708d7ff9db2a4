"""The start-up check of every entry point that uses the database (worker, poller, ask, backfill).

One connection, before any pool is opened (a pool that cannot connect retries for seconds and ends in
"pool initialization incomplete", never the cause): PostgreSQL reachable, the database there, its
schema migrated to this version, and the index's model and dimension those configured. Each failure is
one line that names the cause and the next step.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg

from worker.db.boundary import first_line
from worker.db.meta import IndexMeta, check_index_meta
from worker.db.migrate import pending
from worker.errors import ConfigError, PermanentError, ServiceUnavailableError
from worker.settings import DatabaseSettings, EmbeddingsSettings

MIGRATE = "run `citebot db migrate`"


def check_database(
    database: DatabaseSettings, embeddings: EmbeddingsSettings, *, index: bool = True
) -> IndexMeta | None:
    """Connect once and check the schema and (``index``) the index's model and dimension; raise a
    one-line error naming the next step."""
    where, name, user = _describe(database.url)
    try:
        conn = psycopg.connect(database.url, connect_timeout=max(1, int(database.connect_timeout_s)))
    except psycopg.OperationalError as exc:
        raise _connect_error(exc, where, name, user) from exc
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid CITEBOT_DATABASE__URL: {first_line(exc)}", service="postgres") from exc
    with conn:
        missing = pending(conn, embeddings.dimension)
        has_meta = conn.execute("SELECT to_regclass('index_meta') IS NOT NULL").fetchone()
        if not has_meta or not has_meta[0]:
            raise PermanentError(
                f"database {name!r} has no citebot schema yet: {MIGRATE}", service="postgres"
            )
        if missing:
            raise PermanentError(
                f"database {name!r} is not migrated to this version of citebot (pending: "
                f"{', '.join(missing)}): {MIGRATE}",
                service="postgres",
            )
        return check_index_meta(conn, embeddings.model, embeddings.dimension) if index else None


def _connect_error(exc: psycopg.OperationalError, where: str, name: str, user: str) -> Exception:
    text = str(exc)
    if f'database "{name}" does not exist' in text:
        return PermanentError(
            f"database {name!r} does not exist on {where}: create it (`createdb {name}`), then {MIGRATE}",
            service="postgres",
        )
    if "password authentication failed" in text or ("role" in text and "does not exist" in text):
        return ConfigError(
            f"PostgreSQL on {where} refused user {user!r} ({_reason(text)}): fix CITEBOT_DATABASE__URL",
            service="postgres",
        )
    return ServiceUnavailableError(
        f"PostgreSQL is not reachable on {where} ({_reason(text)}): start it, or fix CITEBOT_DATABASE__URL",
        service="postgres",
    )


def _reason(text: str) -> str:
    """The useful end of a libpq message ("connection refused", "timeout expired", …)."""
    for line in text.strip().splitlines():
        line = line.strip()
        if not line:
            continue
        tail = line.rsplit(": ", 1)[-1].strip()
        return tail[0].lower() + tail[1:] if tail else line
    return type(text).__name__


def _describe(url: str) -> tuple[str, str, str]:
    """(``host:port`` or the socket folder, database name, user) of a postgresql:// URL, no password."""
    parts = urlsplit(url)
    query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
    host = parts.hostname or query.get("host") or "localhost"
    where = f"{host}:{parts.port or 5432}" if not host.startswith("/") else host
    name = parts.path.lstrip("/") or parts.username or "postgres"
    return where, name, parts.username or "postgres"
