"""The worker's ``Indexer`` (``worker.protocols.Indexer``): the post index kept in step with the forum.

``worker`` imports nothing from ``backfill``: its composition root (``worker.assemble``) names this
class (``worker.assemble.INDEXER``) and builds it over the worker's ``Runtime`` on first use, so the
indexing stack loads in workers only, never in the webhook process.
"""

from __future__ import annotations

import logging
from pathlib import Path

from backfill import incremental
from backfill.compose import run_configured
from worker.runtime import Runtime

log = logging.getLogger(__name__)


class BackfillIndexer:
    """Index refreshes over the worker's runtime (its pool, forum client and one embedder) at the
    forum budget's background priority, and scheduled backfills built from its settings."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime.at("background")

    def refresh_post(self, post_id: int, event: str) -> None:
        outcome = incremental.refresh_post(self.runtime, post_id, event)
        log.debug("post %d after %s: %s", post_id, event, outcome)

    def refresh_topic(self, topic_id: int, event: str) -> None:
        result = incremental.refresh_topic(self.runtime, topic_id, event)
        log.debug("topic %d after %s: %s", topic_id, event, result)

    def backfill(self, kind: str, *, path: Path | None = None, source_url: str | None = None) -> str:
        return run_configured(self.runtime.settings, kind, path=path, source_url=source_url).line()
