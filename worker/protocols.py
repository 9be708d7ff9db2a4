"""The small interfaces the pipeline depends on. Clients implement them; tests use ``Fake*`` classes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from worker.domain import (
    Completion,
    EmbedKind,
    ForumCategory,
    ForumPost,
    ForumTopic,
    Member,
    PendingPost,
    SearchHit,
    TagGroup,
)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of one model's space."""

    @property
    def model(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        """One vector per text, in order. Raises TransientError / PermanentError."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores (query, text) pairs with a cross-encoder; returns raw logits in input order."""

    @property
    def name(self) -> str: ...

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]: ...


@runtime_checkable
class ChatModel(Protocol):
    """An OpenAI-compatible chat model, or the offline extractive generator."""

    @property
    def name(self) -> str: ...

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion: ...


@runtime_checkable
class KeywordSearch(Protocol):
    """Discourse's full-text search: one post per topic, terms ANDed."""

    def search(self, query: str, *, limit: int = 25) -> list[SearchHit]: ...


@runtime_checkable
class Forum(KeywordSearch, Protocol):
    """The subset of Discourse the bot uses."""

    def get_post(self, post_id: int) -> ForumPost: ...

    def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic: ...

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost: ...

    def create_post(
        self, topic_id: int, raw: str, *, reply_to_post_number: int | None = None
    ) -> ForumPost | PendingPost: ...

    def get_site_settings(self, names: Sequence[str]) -> dict[str, object]: ...

    def get_user(self, user_id: int) -> Member: ...

    def get_user_by_username(self, username: str) -> Member: ...

    def get_category(self, category_id: int) -> ForumCategory:
        """One category (raises NotFoundError when the forum has none, or will not show it)."""
        ...

    def get_site_categories(self) -> tuple[ForumCategory, ...]:
        """The categories the API user may see (possibly a partial list: lazy-loaded categories)."""
        ...

    def get_tag_groups(self) -> tuple[TagGroup, ...]: ...


class Indexer(Protocol):
    """Keeps the post index in step with the forum (``backfill.indexer.BackfillIndexer``)."""

    def refresh_post(self, post_id: int, event: str) -> None:
        """Re-read one post after a webhook ``event`` and update, add or remove its index row."""
        ...

    def refresh_topic(self, topic_id: int, event: str) -> None:
        """Re-read a whole topic after a topic ``event`` (deleted: every row goes; recovered: back)."""
        ...

    def refresh_category(self, category_id: int, event: str) -> None:
        """Re-read one category after a category ``event`` and record what the forum says of it."""
        ...

    def sync_categories(self) -> str:
        """Record the categories the forum describes now (start-up); returns a summary line."""
        ...

    def backfill(self, kind: str, *, path: Path | None = None, source_url: str | None = None) -> str:
        """One incremental backfill of source ``kind``; returns its summary line."""
        ...
