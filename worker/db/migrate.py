"""Plain-SQL migrations, applied in order, each inside a transaction, recorded in ``schema_migrations``.

Safe to run from two processes at once: every run takes a transaction-level advisory lock first, so
the second waits and then finds nothing left to do. ``{{dimension}}`` in a migration is replaced by
the configured embedding dimension; the model and dimension are recorded in ``index_meta``. The vector
index is then made the kind ``CITEBOT_RETRIEVAL__VECTOR_INDEX`` names (``worker.db.vector_index``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import resources

import psycopg

from worker.db.connect import connect
from worker.db.vector_index import switch_vector_index
from worker.settings import Settings

log = logging.getLogger(__name__)

# Arbitrary but fixed: the key of the advisory lock that serialises migrations.
MIGRATION_LOCK_KEY = 0x43495445_0001
STRATEGY_VERSION = "post-v1"


@dataclass(frozen=True, slots=True)
class Migration:
    version: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class MigrateReport:
    applied: tuple[str, ...]
    already: tuple[str, ...]
    meta_model: str
    meta_dimension: int
    meta_matches: bool


def load_migrations(dimension: int) -> list[Migration]:
    """The shipped migrations, sorted by file name, with ``{{dimension}}`` filled in."""
    folder = resources.files("worker.db") / "migrations"
    found = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [
        Migration(p.name.removesuffix(".sql"), p.read_text("utf-8").replace("{{dimension}}", str(dimension)))
        for p in found
    ]


def migrate(settings: Settings) -> MigrateReport:
    """Apply every pending migration; idempotent."""
    migrations = load_migrations(settings.embeddings.dimension)
    applied: list[str] = []
    already: list[str] = []
    with connect(settings.database, vector=False) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                       version text PRIMARY KEY,
                       checksum text NOT NULL,
                       applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for mig in migrations:
            if mig.version in done:
                already.append(mig.version)
                continue
            log.info("applying migration %s", mig.version)
            conn.execute(mig.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, checksum) VALUES (%s, %s)",
                (mig.version, mig.checksum),
            )
            applied.append(mig.version)
        conn.execute(
            """INSERT INTO index_meta (model, dimension, strategy) VALUES (%s, %s, %s)
                   ON CONFLICT (singleton) DO NOTHING""",
            (settings.embeddings.model, settings.embeddings.dimension, STRATEGY_VERSION),
        )
        row = conn.execute("SELECT model, dimension FROM index_meta").fetchone()
        if row is not None:
            switch_vector_index(conn, settings.retrieval.vector_index, int(row[1]))
    if row is None:  # pragma: no cover - inserted above when missing
        raise RuntimeError("index_meta vanished during migration")
    model, dimension = str(row[0]), int(row[1])
    matches = model == settings.embeddings.model and dimension == settings.embeddings.dimension
    if not matches:
        log.warning(
            "index was built with %s (%d-d) but %s (%d-d) is configured; run the backfill with --reindex",
            model,
            dimension,
            settings.embeddings.model,
            settings.embeddings.dimension,
        )
    return MigrateReport(tuple(applied), tuple(already), model, dimension, matches)


def pending(conn: psycopg.Connection, dimension: int) -> list[str]:
    """Versions not yet applied (empty when the schema is current)."""
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    done: set[str] = set()
    if exists and exists[0]:
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    return [m.version for m in load_migrations(dimension) if m.version not in done]
