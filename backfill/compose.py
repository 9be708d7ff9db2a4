"""Building a run's parts from settings: the source named on the command line and the embedder."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from backfill.sources import PostSource

if TYPE_CHECKING:
    from backfill.excerpts import ExcerptSummary
    from backfill.run import Summary
from worker.errors import ConfigError
from worker.protocols import Embedder
from worker.settings import Settings

log = logging.getLogger(__name__)


def build_source(
    kind: str,
    settings: Settings,
    *,
    path: Path | None = None,
    source_url: str | None = None,
    public_export: bool = False,
) -> PostSource:
    """The ``db``, ``api`` or ``file`` source (``public_export``: the file source's ``assume_public``)."""
    if public_export and kind != "file":
        raise ConfigError("--public-export describes an export folder: use it with --source file")
    if kind == "file":
        if path is None:
            raise ConfigError("--source file needs --path DIR (a folder with topics/<id>.json)")
        from backfill.sources.file import FileSource

        return FileSource(path, assume_public=public_export)
    if kind == "db":
        if not source_url:
            raise ConfigError("--source db needs --database-url-source URL (the Discourse replica)")
        from backfill.sources.db import DbSource

        return DbSource(source_url, connect_timeout_s=settings.database.connect_timeout_s)
    if kind == "api":
        import httpx

        from backfill.sources.api import ApiSource
        from worker.budget import shared_budget

        http = httpx.Client(timeout=settings.discourse.timeout_s)
        return ApiSource(http, settings.discourse, budget=shared_budget(settings))
    raise ConfigError(f"unknown source {kind!r}: choose db, api or file")


def build_embedder(settings: Settings, http: httpx.Client | None = None) -> Embedder:
    """The configured embedder (``worker.clients.embeddings``); a local model is loaded from disk.

    HTTP providers use ``http``, which the caller owns and closes; without one they get a client of
    their own that lives as long as the process (scripts, the eval).
    """
    from worker.clients.embeddings import build_embedder as build

    if http is None and settings.embeddings.provider != "local":
        http = httpx.Client(timeout=settings.embeddings.timeout_s)
    return build(settings, http)


def find_tokenizer(embedder: Embedder) -> Any | None:
    """A tokenizer of the embedding model for exact truncation, or None (the character heuristic).

    The preparer runs in the reading thread while other threads embed, and a fast tokenizer's padding
    state is per instance: it must never share the embedder's own. So it is loaded afresh from the
    model's files when they are local, and otherwise copied from the embedder.
    """
    path = getattr(embedder, "path", None)
    if path is not None and (Path(path) / "tokenizer.json").is_file():
        try:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:  # an unusable tokenizer falls back to the documented heuristic
            log.warning("no tokenizer from %s (%s); truncating by characters", path, type(exc).__name__)
            return None
    shared = getattr(embedder, "tokenizer", None)
    if shared is None:
        return None
    try:
        return copy.deepcopy(shared)
    except Exception as exc:
        log.warning("cannot copy the embedder's tokenizer (%s); truncating by characters", type(exc).__name__)
        return None


def run_configured(
    settings: Settings,
    kind: str,
    *,
    path: Path | None = None,
    source_url: str | None = None,
    reindex: bool = False,
    limit: int | None = None,
    page_size: int = 1000,
    progress: bool | None = False,
    prune: bool = False,
    public_export: bool = False,
    bulk: bool = False,
    full: bool = False,
) -> Summary:
    """One backfill run built from settings: the CLI's, and the one a scheduled actor would call.

    A run of the same source already in progress makes this raise ``BackfillBusyError`` (a
    ``PermanentError``: a scheduler should skip that tick, not retry).
    """
    from backfill.run import BackfillOptions, run_backfill

    source = build_source(kind, settings, path=path, source_url=source_url, public_export=public_export)
    http = (
        None
        if settings.embeddings.provider == "local"
        else httpx.Client(timeout=settings.embeddings.timeout_s)
    )
    embedder = build_embedder(settings, http)
    options = BackfillOptions(
        reindex=reindex,
        limit=limit,
        page_size=max(1, page_size),
        batch_size=settings.embeddings.batch_size,
        concurrency=settings.embeddings.concurrency,
        max_tokens=settings.embeddings.max_tokens,
        progress=progress,
        excluded_authors=bot_authors(settings),
        prune=prune,
        bulk=bulk,
        full=full,
    )
    try:
        return run_backfill(settings.database, source, embedder, options, tokenizer=find_tokenizer(embedder))
    finally:
        if http is not None:
            http.close()
        close = getattr(source, "close", None)
        if callable(close):
            close()


def run_excerpts(
    settings: Settings, *, reset: bool = False, limit: int | None = None, progress: bool | None = False
) -> ExcerptSummary:
    """The second bi-encoder's pass over the post index (``backfill.excerpts``), built from settings."""
    from backfill.excerpts import fill_excerpts
    from worker.clients.embeddings import build_excerpt_embedder

    cfg = settings.excerpt_embeddings
    http = None if cfg.provider == "local" else httpx.Client(timeout=cfg.timeout_s)
    try:
        embedder = build_excerpt_embedder(settings, http)
        if embedder is None:
            raise ConfigError("no second bi-encoder: set CITEBOT_EXCERPT_EMBEDDINGS__MODEL")
        return fill_excerpts(
            settings.database,
            embedder,
            excerpt_chars=settings.reranker.excerpt_chars,
            batch_size=cfg.batch_size,
            concurrency=cfg.concurrency,
            limit=limit,
            reset=reset,
            progress=progress,
        )
    finally:
        if http is not None:
            http.close()


def bot_authors(settings: Settings) -> tuple[str, ...]:
    """Usernames whose posts are never indexed: the bot (as mentioned and as it posts)."""
    return tuple(sorted({settings.discourse.bot_username.lower(), settings.discourse.api_username.lower()}))
