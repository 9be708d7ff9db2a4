"""The services an eval run talks to: the embedded defaults, or the ones configured in the environment.

Embedded (no ``CITEBOT_*`` service configured): PostgreSQL + pgvector whose data lives in a cache
folder (``.cache/eval-pg``; kept between runs, so the index is reused), the local forum server
(``eval/stack/forum``) loaded with the same export for Discourse's ``/search.json``, and the local
model server (``eval/stack/modelserver``: TEI's ``/embed`` and ``/rerank``) in a thread. The post
index is filled by the backfill (``backfill.run``, file source): a second run on the same export finds
every digest unchanged and embeds nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from eval.stack.forum.thread import LIFTED_BUDGET, ForumThread
from eval.stack.launcher import Launcher
from worker.settings import Settings, load_settings

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
EVAL_TIMEOUT_S = 120.0  # rerank deadline in the eval: measure the reranker, not a busy machine's timeouts


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where each service answers, as ``Settings`` for the retriever."""

    settings: Settings
    embedded: bool


def export_key(export: Path) -> str:
    """A short stable name for an export folder (one index and one forum database per export)."""
    return hashlib.sha256(str(export.resolve()).encode()).hexdigest()[:10]


def configured_settings() -> Settings | None:
    """Settings from the environment when every service the eval needs is configured there, else None."""
    env = os.environ
    needed = ("CITEBOT_DATABASE__URL", "CITEBOT_DISCOURSE__BASE_URL")
    if not all(env.get(k) for k in needed):
        return None
    return load_settings()


class EmbeddedStack:
    """Starts (and stops, with the stack launcher) the embedded PostgreSQL, the local forum and the local
    model server, the last two in this process."""

    def __init__(
        self,
        export: Path,
        *,
        cache: Path = CACHE / "eval-pg",
        rerank_timeout_s: float = EVAL_TIMEOUT_S,
        name: str | None = None,
        server_url: str | None = None,
        models: Any = None,
        fresh_index: bool = False,
    ) -> None:
        self.export = export.resolve()
        self.server_url = server_url  # a PostgreSQL server to use instead of starting one in ``cache``
        self.cache = cache
        self.rerank_timeout_s = rerank_timeout_s
        self.name = name or export_key(self.export)
        self.models = models  # a ModelServerThread not started yet; default: ``load_models()``'s
        self.fresh_index = fresh_index  # drop the post index left by an earlier run
        self._launcher: Launcher | None = None
        self._store: Any = None

    def start(self) -> Endpoints:
        from eval.stack.forum.loader import load_export
        from eval.stack.forum.store import ForumStore
        from eval.stack.modelserver.server import ModelServerThread, load_models
        from eval.stack.postgres import ensure_database
        from worker.db.migrate import migrate

        launcher = self._launcher = Launcher(self.cache.parent / "eval-logs")
        try:
            url = launcher.postgres(self.cache, url=self.server_url)
            forum_db = ensure_database(url, f"citebot_eval_forum_{self.name}")
            store = self._store = ForumStore(forum_db)
            launcher.on_stop(self._close_store)
            store.init_schema()
            meta = store.meta()
            if meta is None or meta["export"] != str(self.export):
                report = load_export(store, self.export)
                log.info(
                    "forum: loaded %d topics, %d posts in %.1f s", report.topics, report.posts, report.seconds
                )
            forum = ForumThread(store)
            forum_url = forum.start()
            launcher.on_stop(forum.stop)
            models = self.models or ModelServerThread(*load_models())
            model_url = models.start(timeout_s=120)
            launcher.on_stop(models.stop)
            index_db = ensure_database(url, f"citebot_eval_{self.name}", fresh=self.fresh_index)
            settings = Settings.model_validate(
                {
                    "database": {"url": index_db},
                    "embeddings": {"provider": "tei", "base_url": model_url, "timeout_s": 120},
                    "reranker": {"base_url": model_url, "timeout_s": self.rerank_timeout_s},
                    "discourse": {
                        "base_url": forum_url,
                        "api_key": "local-forum-key",
                        "api_username": "system",
                        **LIFTED_BUDGET,
                    },
                }
            )
            migrate(settings)
        except BaseException:
            self.stop()
            raise
        return Endpoints(settings, embedded=True)

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    @contextmanager
    def hidden(self, post_ids: Sequence[int]) -> Iterator[None]:
        """Hide posts from the local forum (its search included) for the duration of one question.

        The question's own post must not exist for the keyword channel either: dropping it from the
        hits is not enough, since Discourse returns one post per topic and the question's post would
        hide the rest of its topic.
        """
        store = self._store
        if store is None or not post_ids:
            yield
            return
        hide = [pid for pid in post_ids if (row := store.post(pid)) is not None and row["deleted_at"] is None]
        for pid in hide:
            store.set_deleted(pid, True)
        try:
            yield
        finally:
            for pid in hide:
                store.set_deleted(pid, False)

    def stop(self) -> None:
        if self._launcher is not None:
            self._launcher.stop()
            self._launcher = None

    def __enter__(self) -> Endpoints:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def index_export(
    settings: Settings, export: Path, *, local: bool = True, progress: bool | None = False
) -> Any:
    """Fill the post index from ``export`` with the backfill (file source); returns its ``Summary``.

    ``local`` embeds in-process with the same model the model server serves (no HTTP per batch, same
    vectors and model id); otherwise through the configured embedder. The texts are cut with a
    tokenizer instance of their own: the model's tokenizer is not safe to share between the reading
    thread and the embedding thread (a fast tokenizer's padding state is per instance).
    """
    from backfill.compose import build_embedder, find_tokenizer
    from backfill.run import BackfillOptions, run_backfill
    from backfill.sources.file import FileSource

    cfg = settings.embeddings
    if local:
        cfg = cfg.model_copy(
            update={"provider": "local", "base_url": None, "batch_size": 64, "concurrency": 1}
        )
        settings = settings.model_copy(update={"embeddings": cfg})
    embedder = build_embedder(settings)
    tokenizer = None
    if local:
        from transformers import AutoTokenizer

        from worker.clients.local_embedder import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path(cfg.model)))
    else:
        tokenizer = find_tokenizer(embedder)
    options = BackfillOptions(
        batch_size=cfg.batch_size,
        concurrency=cfg.concurrency,
        max_tokens=cfg.max_tokens,
        progress=progress,
    )
    # The eval's forums are archives of public forums (their READMEs): every category they carry is
    # public, on the operator's word (``citebot backfill --public-export``; backfill.categories).
    source = FileSource(export.resolve(), assume_public=True)
    summary = run_backfill(settings.database, source, embedder, options, tokenizer=tokenizer)
    log.info("%s", summary.line())
    return summary
