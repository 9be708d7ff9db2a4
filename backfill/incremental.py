"""Keeping the index fresh one post, topic or category at a time (webhooks; called by the dramatiq actors
in ``worker.actors`` through ``backfill.indexer``). A topic event re-reads the whole topic: a deleted one
(404, or 200 with ``deleted_at`` to staff) leaves the index entirely, a recovered one comes back post by
post, and posts the index holds under the topic but the topic no longer lists (moved elsewhere) are
followed to where they are now (``MOVED_FOLLOW`` at most; the rest leave the index).

Same text recipe, same digest and same eligibility rule as the bulk backfill, so an event for a post
whose text did not change costs no embedding; a row whose text is unchanged but whose author, topic or
tags changed is rewritten without one (``backfill.rows``). The forum is read through the ``Forum``
protocol; a category's name and permissions come from the ``categories`` table, and a category it has
not described is looked up (``backfill.category_sync``). Tags an anonymous reader may not see are left
out (``backfill.tags``).

``deps`` is either an ``IndexDeps`` (tests, scripts) or the worker's ``Runtime`` (``forum``, ``pool``,
``settings``, ``embedder``), from which an ``IndexDeps`` is built with the process's one embedder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from backfill import category_sync
from backfill.compose import bot_authors
from backfill.embedding import embed_with_retry
from backfill.excerpts import write_excerpts
from backfill.prepare import PreparedPost, Preparer, Truncator
from backfill.rows import needs, rewrite, states_of
from backfill.sources import SourcePost
from backfill.sources.discourse_json import to_source_post
from backfill.store import IndexStore
from backfill.tags import hidden_tag_names, public_tags
from worker.db.meta import check_index_meta
from worker.domain import ForumPost, ForumTopic
from worker.errors import CitebotError, NotFoundError
from worker.protocols import Embedder, Forum
from worker.retrieval.excerpts import check_excerpt_meta

log = logging.getLogger(__name__)
REMOVING_EVENTS = frozenset({"post_destroyed"})
# Posts a topic no longer lists that a refresh follows to their new place (one post read each).
MOVED_FOLLOW = 50
HiddenTagsFn = Callable[[], frozenset[str]]


@dataclass(frozen=True, slots=True)
class IndexDeps:
    """What an incremental update needs: the forum, the embedder and a database connection."""

    forum: Forum
    embedder: Embedder
    conn: psycopg.Connection
    max_tokens: int = 256
    tokenizer: Any | None = None
    excluded_authors: tuple[str, ...] = ()
    excerpt_embedder: Embedder | None = None  # the second bi-encoder: its column is kept in step too
    # The tags an anonymous reader may not see; None: read the forum's tag groups at each use.
    hidden_tags: HiddenTagsFn | None = None

    def hidden(self) -> frozenset[str]:
        if self.hidden_tags is not None:
            return self.hidden_tags()
        return hidden_tag_names(self.forum.get_tag_groups())


@contextmanager
def _resolve(deps: Any, tags: HiddenTagsFn | None = None) -> Iterator[IndexDeps]:
    if isinstance(deps, IndexDeps):
        yield deps
        return
    # The worker's Runtime: the process's one embedder, the same the answer pipeline uses.
    settings = deps.settings
    embedder = deps.embedder()
    with deps.pool.connection() as conn:
        yield IndexDeps(
            deps.forum,
            embedder,
            conn,
            settings.embeddings.max_tokens,
            excluded_authors=bot_authors(settings),
            excerpt_embedder=second()
            if callable(second := getattr(deps, "excerpt_embedder", None))
            else None,
            hidden_tags=tags,
        )


def _preparer(deps: IndexDeps) -> Preparer:
    max_tokens = int(getattr(deps.embedder, "max_tokens", 0) or deps.max_tokens)
    tokenizer = deps.tokenizer if deps.tokenizer is not None else getattr(deps.embedder, "tokenizer", None)
    return Preparer(deps.embedder.model, Truncator(max_tokens, tokenizer), deps.excluded_authors)


def _context(d: IndexDeps, category_id: int | None) -> tuple[str | None, frozenset[int]]:
    """The category's name, and the restricted set ``prepare`` reads: the category itself when the forum
    says it (or an ancestor) is read-restricted, or will not show it (looked up when undescribed)."""
    if category_id is None:
        return None, frozenset()
    info = category_sync.describe(d.forum, d.conn, category_id)
    if info is None or info.restricted:
        return (info.name if info else None), frozenset({category_id})
    return info.name, frozenset()


def _embed_and_write(deps: IndexDeps, store: IndexStore, changed: list[PreparedPost]) -> int:
    if not changed:
        return 0
    vectors = embed_with_retry(deps.embedder, [p.text for p in changed])
    written = store.upsert_rows(changed, np.asarray(vectors))
    _write_excerpts(deps, changed)
    return written


def _write_excerpts(deps: IndexDeps, changed: list[PreparedPost]) -> None:
    """The second bi-encoder's rows of the re-embedded posts; a failure is logged, never raised (the
    post's own row is written; the next ``citebot backfill --excerpts`` fills what is missing)."""
    embedder = deps.excerpt_embedder
    if embedder is None:
        return
    rows = [(p.post.post_id, p.post.topic_title, p.text) for p in changed]
    try:
        with deps.conn.transaction():
            check_excerpt_meta(deps.conn, embedder.model, embedder.dimension)
        write_excerpts(deps.conn, embedder, rows)
    except (CitebotError, psycopg.Error) as exc:
        log.warning("excerpt vectors not written (the next excerpt pass fills them): %s", exc)


def remove_post(deps: Any, post_id: int) -> bool:
    """Drop one post from the index; True when it was there.

    The topic's first post is checked again afterwards: it may have lost its only answer.
    """
    with _resolve(deps) as d:
        check_index_meta(d.conn, d.embedder.model, d.embedder.dimension)
        d.conn.rollback()
        store = IndexStore(d.conn, d.embedder.model)
        topic_id = store.topic_of(post_id)
        removed = store.delete_posts([post_id]) > 0
        if topic_id is not None:
            _recheck_first_post(d, store, topic_id, post_id)
    log.info("post removed from the index" if removed else "post was not indexed", extra={"post_id": post_id})
    return removed


def refresh_post(
    deps: Any, post_id: int, event: str = "post_edited", *, tags: HiddenTagsFn | None = None
) -> str:
    """Bring one post's row up to date: ``embedded``, ``rewritten``, ``unchanged``, ``removed`` or
    ``absent``.

    A reply can turn its topic's first post from an open question into the context of an answer (or
    back, when it is edited or goes): the first post is checked again with it (``backfill.evidence``).
    """
    if event in REMOVING_EVENTS:
        return "removed" if remove_post(deps, post_id) else "absent"
    with _resolve(deps, tags) as d:
        check_index_meta(d.conn, d.embedder.model, d.embedder.dimension)
        d.conn.rollback()
        store = IndexStore(d.conn, d.embedder.model)
        outcome = _refresh_one(d, store, post_id)
    if outcome in ("embedded", "rewritten"):
        log.info("post %s", outcome, extra={"post_id": post_id, "event": event})
    return outcome


def _refresh_one(d: IndexDeps, store: IndexStore, post_id: int) -> str:
    """Re-read one post and its topic (wherever the post is now) and index, rewrite or remove its row."""
    try:
        post = d.forum.get_post(post_id)
        topic = d.forum.get_topic(post.topic_id)
    except NotFoundError:
        topic_id = store.topic_of(post_id)
        gone = store.delete_posts([post_id])
        if topic_id is not None:
            _recheck_first_post(d, store, topic_id, post_id)
        return "removed" if gone else "absent"
    name, restricted = _context(d, topic.category_id)
    hidden = d.hidden()
    outcome = _write_one(d, store, _public(post, topic, name, hidden), restricted)
    if post.post_number != 1:
        first = next((p for p in topic.posts if p.post_number == 1), None)
        if first is not None:
            _write_one(d, store, _public(first, topic, name, hidden), restricted)
    return outcome


def _public(post: ForumPost, topic: ForumTopic, name: str | None, hidden: frozenset[str]) -> SourcePost:
    """The post in the backfill's shape, with the tags an anonymous reader sees."""
    return public_tags(to_source_post(post, topic, name), hidden)


def _write_one(d: IndexDeps, store: IndexStore, source: SourcePost, restricted: frozenset[int]) -> str:
    """Index, rewrite, keep or remove one post as evidence decides: ``embedded``, ``rewritten``,
    ``unchanged``, ``removed``, ``absent``."""
    prepared = _preparer(d).prepare(source, restricted)
    if isinstance(prepared, str):
        gone = store.delete_posts([source.post_id])
        log.info("post not indexed (%s)", prepared, extra={"post_id": source.post_id})
        return "removed" if gone else "absent"
    need = needs(prepared, states_of(d.conn, [source.post_id]).get(source.post_id))
    if need == "keep":
        return "unchanged"
    if need == "rewrite":
        rewrite(d.conn, [prepared])
        return "rewritten"
    _embed_and_write(d, store, [prepared])
    return "embedded"


def _recheck_first_post(d: IndexDeps, store: IndexStore, topic_id: int, gone: int) -> None:
    """Decide the topic's first post again after post ``gone`` left the index (it may have been the
    only answer); nothing to do when ``gone`` was the first post itself."""
    try:
        topic = d.forum.get_topic(topic_id)
    except NotFoundError:
        return
    first = next((p for p in topic.posts if p.post_number == 1), None)
    if first is not None and first.id != gone:
        name, restricted = _context(d, topic.category_id)
        _write_one(d, store, _public(first, topic, name, d.hidden()), restricted)


@dataclass(frozen=True, slots=True)
class TopicRefresh:
    embedded: int
    unchanged: int
    removed: int
    rewritten: int = 0
    followed: int = 0  # posts the topic no longer lists, read again where they are now


def refresh_topic(
    deps: Any, topic_id: int, event: str = "topic_edited", *, tags: HiddenTagsFn | None = None
) -> TopicRefresh:
    """Re-check every post of a topic (a new title, category, tags or visibility changes each post's
    text or eligibility), and the posts indexed under it that it no longer lists (moved away)."""
    with _resolve(deps, tags) as d:
        check_index_meta(d.conn, d.embedder.model, d.embedder.dimension)
        d.conn.rollback()
        store = IndexStore(d.conn, d.embedder.model)
        try:
            topic = d.forum.get_topic(topic_id, all_posts=True)
        except NotFoundError:
            return TopicRefresh(0, 0, store.delete_topic_except(topic_id, ()))
        name, restricted = _context(d, topic.category_id)
        hidden = d.hidden()
        preparer = _preparer(d)
        eligible: list[PreparedPost] = []
        ineligible: list[int] = []
        for post in topic.posts:
            prepared = preparer.prepare(_public(post, topic, name, hidden), restricted)
            if isinstance(prepared, str):
                ineligible.append(post.id)
            else:
                eligible.append(prepared)
        known = states_of(d.conn, (p.post.post_id for p in eligible))
        plan = [(p, needs(p, known.get(p.post.post_id))) for p in eligible]
        changed = [p for p, need in plan if need == "embed"]
        rewritten = [p for p, need in plan if need == "rewrite"]
        for start in range(0, len(changed), 32):
            _embed_and_write(d, store, changed[start : start + 32])
        rewrite(d.conn, rewritten)
        # A post keeps its id when it moves (PostMover#move): rows of this topic's posts are found by id.
        removed = store.delete_posts(ineligible)
        listed = {p.id for p in topic.posts}
        moved = sorted(store.topic_post_ids(topic_id) - listed)
        followed = 0
        for post_id in moved[:MOVED_FOLLOW]:
            if _refresh_one(d, store, post_id) in ("removed", "absent"):
                removed += 1
            followed += 1
        removed += store.delete_topic_except(topic_id, [p.post.post_id for p in eligible])
    result = TopicRefresh(
        len(changed), len(eligible) - len(changed) - len(rewritten), removed, len(rewritten), followed
    )
    log.info(
        "topic refreshed: %d embedded, %d rewritten, %d unchanged, %d removed, %d moved away",
        result.embedded,
        result.rewritten,
        result.unchanged,
        result.removed,
        result.followed,
        extra={"topic_id": topic_id, "event": event},
    )
    return result


def refresh_category(deps: Any, category_id: int, event: str = "category_updated") -> str:
    """Record what the forum says of a category now (``backfill.category_sync.refresh_category``)."""
    with _resolve(deps) as d:
        return category_sync.refresh_category(d.forum, d.conn, category_id, event)


def sync_categories(deps: Any) -> str:
    """Record the forum's categories as it describes them now (``backfill.category_sync``)."""
    with _resolve(deps) as d:
        return category_sync.sync_categories(d.forum, d.conn)
