"""Keeping the index fresh one post or topic at a time (webhooks: post_edited, post_destroyed,
post_recovered, topic_edited, topic_destroyed, topic_recovered; called by the dramatiq actors in
``worker.actors``). A topic event re-reads the whole topic: a deleted one (404, or 200 with
``deleted_at`` to staff) leaves the index entirely, a recovered one comes back post by post.

Same text recipe, same digest and same eligibility rule as the bulk backfill, so an event for a post
whose text did not change costs no embedding. The forum is read through the ``Forum`` protocol; the
category name comes from ``category_names`` (recorded by the backfill), restriction from
``restricted_categories``.

``deps`` is either an ``IndexDeps`` (tests, scripts) or the worker's ``Runtime`` (``forum``, ``pool``,
``settings``, ``embedder``), from which an ``IndexDeps`` is built with the process's one embedder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg

from backfill.compose import bot_authors
from backfill.embedding import embed_with_retry
from backfill.evidence import REPLY_WINDOW
from backfill.excerpts import write_excerpts
from backfill.prepare import PreparedPost, Preparer, Truncator
from backfill.sources import SourcePost
from backfill.store import IndexStore
from worker.db.meta import check_index_meta
from worker.domain import ForumPost, ForumTopic
from worker.errors import CitebotError, NotFoundError
from worker.protocols import Embedder, Forum
from worker.retrieval.excerpts import check_excerpt_meta

log = logging.getLogger(__name__)
REMOVING_EVENTS = frozenset({"post_destroyed"})


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


@contextmanager
def _resolve(deps: Any) -> Iterator[IndexDeps]:
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
        )


def _preparer(deps: IndexDeps) -> Preparer:
    max_tokens = int(getattr(deps.embedder, "max_tokens", 0) or deps.max_tokens)
    tokenizer = deps.tokenizer if deps.tokenizer is not None else getattr(deps.embedder, "tokenizer", None)
    return Preparer(deps.embedder.model, Truncator(max_tokens, tokenizer), deps.excluded_authors)


def _context(conn: psycopg.Connection, category_id: int | None) -> tuple[str | None, frozenset[int]]:
    with conn.transaction():
        rows = conn.execute("SELECT category_id FROM restricted_categories").fetchall()
        name_row = (
            conn.execute("SELECT name FROM category_names WHERE category_id = %s", (category_id,)).fetchone()
            if category_id is not None
            else None
        )
    return (str(name_row[0]) if name_row else None), frozenset(int(r[0]) for r in rows)


def to_source_post(post: ForumPost, topic: ForumTopic, category_name: str | None) -> SourcePost:
    """A forum post (and its topic) in the backfill's shape.

    A first post carries the topic's other posts that ``topic.posts`` holds (the first page of the
    stream), so ``backfill.evidence`` can tell an open question; with no posts loaded it cannot tell.
    """
    replies: tuple[SourcePost, ...] | None = None
    if post.post_number == 1 and topic.posts:
        replies = tuple(
            _source(p, topic, category_name, None) for p in topic.posts[:REPLY_WINDOW] if p.id != post.id
        )
    return _source(post, topic, category_name, replies)


def _source(
    post: ForumPost, topic: ForumTopic, category_name: str | None, replies: tuple[SourcePost, ...] | None
) -> SourcePost:
    return SourcePost(
        post_id=post.id,
        topic_id=topic.id,
        post_number=post.post_number,
        topic_slug=topic.slug or post.topic_slug,
        topic_title=topic.title or post.topic_title,
        category_id=topic.category_id,
        category_name=category_name,
        tags=topic.tags,
        cooked=post.cooked,
        raw=post.raw,
        post_type=post.post_type,
        hidden=post.hidden,
        deleted=post.deleted,
        archetype=topic.archetype,
        topic_visible=topic.visible,
        topic_deleted=topic.deleted,
        username=post.username,
        updated_at=post.updated_at,
        reply_to_post_number=post.reply_to_post_number,
        reply_to_username=post.reply_to_username,
        replies=replies,
    )


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


def refresh_post(deps: Any, post_id: int, event: str = "post_edited") -> str:
    """Bring one post's row up to date: ``embedded``, ``unchanged``, ``removed`` or ``absent``.

    A reply can turn its topic's first post from an open question into the context of an answer (or
    back, when it is edited or goes): the first post is checked again with it (``backfill.evidence``).
    """
    if event in REMOVING_EVENTS:
        return "removed" if remove_post(deps, post_id) else "absent"
    with _resolve(deps) as d:
        check_index_meta(d.conn, d.embedder.model, d.embedder.dimension)
        d.conn.rollback()
        store = IndexStore(d.conn, d.embedder.model)
        try:
            post = d.forum.get_post(post_id)
            topic = d.forum.get_topic(post.topic_id)
        except NotFoundError:
            topic_id = store.topic_of(post_id)
            gone = store.delete_posts([post_id])
            if topic_id is not None:
                _recheck_first_post(d, store, topic_id, post_id)
            return "removed" if gone else "absent"
        name, restricted = _context(d.conn, topic.category_id)
        outcome = _write_one(d, store, to_source_post(post, topic, name), restricted)
        if post.post_number != 1:
            first = next((p for p in topic.posts if p.post_number == 1), None)
            if first is not None:
                _write_one(d, store, to_source_post(first, topic, name), restricted)
    if outcome == "embedded":
        log.info("post re-embedded", extra={"post_id": post_id, "event": event})
    return outcome


def _write_one(d: IndexDeps, store: IndexStore, source: SourcePost, restricted: frozenset[int]) -> str:
    """Index, keep or remove one post as evidence decides: ``embedded``, ``unchanged``, ``removed``,
    ``absent``."""
    prepared = _preparer(d).prepare(source, restricted)
    if isinstance(prepared, str):
        gone = store.delete_posts([source.post_id])
        log.info("post not indexed (%s)", prepared, extra={"post_id": source.post_id})
        return "removed" if gone else "absent"
    if store.digests_of([source.post_id]).get(source.post_id) == prepared.digest:
        return "unchanged"
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
        name, restricted = _context(d.conn, topic.category_id)
        _write_one(d, store, to_source_post(first, topic, name), restricted)


@dataclass(frozen=True, slots=True)
class TopicRefresh:
    embedded: int
    unchanged: int
    removed: int


def refresh_topic(deps: Any, topic_id: int, event: str = "topic_edited") -> TopicRefresh:
    """Re-check every post of a topic (a new title, category or tags changes each post's text)."""
    with _resolve(deps) as d:
        check_index_meta(d.conn, d.embedder.model, d.embedder.dimension)
        d.conn.rollback()
        store = IndexStore(d.conn, d.embedder.model)
        try:
            topic = d.forum.get_topic(topic_id, all_posts=True)
        except NotFoundError:
            return TopicRefresh(0, 0, store.delete_topic_except(topic_id, ()))
        name, restricted = _context(d.conn, topic.category_id)
        preparer = _preparer(d)
        eligible: list[PreparedPost] = []
        for post in topic.posts:
            prepared = preparer.prepare(to_source_post(post, topic, name), restricted)
            if not isinstance(prepared, str):
                eligible.append(prepared)
        known = store.digests_of(p.post.post_id for p in eligible)
        changed = [p for p in eligible if known.get(p.post.post_id) != p.digest]
        for start in range(0, len(changed), 32):
            _embed_and_write(d, store, changed[start : start + 32])
        removed = store.delete_topic_except(topic_id, [p.post.post_id for p in eligible])
    result = TopicRefresh(len(changed), len(eligible) - len(changed), removed)
    log.info(
        "topic refreshed: %d embedded, %d unchanged, %d removed",
        result.embedded,
        result.unchanged,
        result.removed,
        extra={"topic_id": topic_id, "event": event},
    )
    return result
