"""The worker's ``Indexer`` (``worker.protocols.Indexer``): the post index kept in step with the forum.

The worker's composition root (``worker.app.assemble``, above ``backfill``) builds it over the worker's
``Runtime`` on first use; the webhook process, which only enqueues, never builds it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from backfill import incremental
from backfill.compose import run_configured
from backfill.tags import HIDDEN_TAGS_TTL_S, HiddenTags
from worker.runtime import Runtime

log = logging.getLogger(__name__)


class BackfillIndexer:
    """Index refreshes over the worker's runtime (its pool, forum client and one embedder) at the
    forum budget's background priority, and scheduled backfills built from its settings."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime.at("background")
        # The forum's tag groups, read at most every few minutes (no webhook reports their changes).
        self.tags = HiddenTags(self.runtime.forum.get_tag_groups, ttl_s=HIDDEN_TAGS_TTL_S)

    def refresh_post(self, post_id: int, event: str) -> None:
        outcome = incremental.refresh_post(self.runtime, post_id, event, tags=self.tags)
        log.debug("post %d after %s: %s", post_id, event, outcome)

    def refresh_topic(self, topic_id: int, event: str) -> None:
        result = incremental.refresh_topic(self.runtime, topic_id, event, tags=self.tags)
        log.debug("topic %d after %s: %s", topic_id, event, result)

    def refresh_category(self, category_id: int, event: str) -> None:
        outcome = incremental.refresh_category(self.runtime, category_id, event)
        log.debug("category %d after %s: %s", category_id, event, outcome)

    def sync_categories(self) -> str:
        return incremental.sync_categories(self.runtime)

    def backfill(self, kind: str, *, path: Path | None = None, source_url: str | None = None) -> str:
        return run_configured(self.runtime.settings, kind, path=path, source_url=source_url).line()
