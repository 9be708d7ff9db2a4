"""The backfill job: source → prepare → digest check → embed (thread pool) → COPY upsert → checkpoint.

A run is incremental unless told otherwise: it writes into the live index in place and never drops the
vector index, and a ``Watermarked`` source (``api``) reads only what is newer than its last complete
walk. A bulk load (``--bulk``, ``--reindex``, or a load into an empty table) drops the index and builds it
at the end; it runs alone (the backfill lock, exclusively). Whatever stopped a bulk load, the next run
builds the index first (``backfill.hnsw``), so the scheduled incremental job brings it back.

Reading and preparing the next page overlaps with embedding the previous ones; pages are committed in
source order, each with its checkpoint, so an interrupted run resumes after the last committed page and
re-embeds nothing that was committed (and, thanks to the digests, nothing that was written at all).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psycopg

from backfill.categories import names, record, restricted_ids
from backfill.embedding import EmbedResult, embed_batch
from backfill.hnsw import build_index, drop_index, index_state
from backfill.lock import BackfillLock
from backfill.prepare import PreparedPost, Preparer, Truncator
from backfill.progress import Progress
from backfill.rows import needs, states_in
from backfill.sources import PostSource, SourceBatch, Watermarked
from backfill.store import IndexStore
from worker.db.connect import connect
from worker.db.meta import check_index_meta, read_index_meta
from worker.protocols import Embedder
from worker.retry import RetryPolicy
from worker.settings import DatabaseSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackfillOptions:
    reindex: bool = False
    limit: int | None = None
    page_size: int = 1000
    batch_size: int = 32
    concurrency: int = 2
    writers: int = 2  # connections writing pages at once (committed in source order)
    max_tokens: int = 256
    progress: bool | None = None
    progress_every_s: float = 30.0  # without a terminal: one progress line this often (the first sooner)
    build_index: bool = True  # False leaves a dropped index missing (benchmarks; a later run builds it)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    excluded_authors: tuple[str, ...] = ()  # the bot's own replies are never indexed
    prune: bool = False  # the range sweep removes any row the source lacks, not only its own
    bulk: bool = False  # drop the vector index, load, build it at the end (alone: the exclusive lock)
    full: bool = False  # a Watermarked source walks everything again, not only what is newer


@dataclass(frozen=True, slots=True)
class Summary:
    """What one run did. ``timings`` splits the wall time by stage (seconds)."""

    source: str
    status: str
    seen: int
    embedded: int
    skipped: int
    removed: int
    failed: int
    ineligible: int
    duration_s: float
    resumed_from: int | None
    index_build_s: float
    reasons: dict[str, int]
    timings: dict[str, float]
    rewritten: int = 0  # among ``skipped``: same text, other columns rewritten (backfill.rows)
    bulk: bool = False  # the run dropped the vector index and built it at the end

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        return (
            f"backfill {self.source}: {self.status}; seen {self.seen}, embedded {self.embedded}, "
            f"skipped {self.skipped} (unchanged"
            + (f"; {self.rewritten} rewritten" if self.rewritten else "")
            + f"), removed {self.removed}, failed {self.failed}, "
            f"ineligible {self.ineligible}; {self.duration_s:.1f} s"
            + (f" (index build {self.index_build_s:.1f} s)" if self.index_build_s else "")
        )


class BackfillInterrupted(KeyboardInterrupt):
    """The run was stopped (Ctrl-C, SIGTERM) after saving its finished pages and its checkpoint.

    A ``KeyboardInterrupt``, so that whatever stops on Ctrl-C still stops; it carries the run's
    ``summary`` (status ``interrupted``, also recorded in ``backfill_state``). The same command resumes.
    """

    def __init__(self, summary: Summary) -> None:
        super().__init__(summary.line())
        self.summary = summary


@dataclass(slots=True)
class _Page:
    batch: SourceBatch
    keep: list[int]
    to_embed: list[PreparedPost]
    futures: list[tuple[int, Future[EmbedResult]]]
    skipped: int
    reasons: Counter[str]
    fresh: bool = False
    rewritten: list[PreparedPost] = field(default_factory=list)


class _Run:
    def __init__(
        self,
        stores: Sequence[IndexStore],
        reader: IndexStore,
        source: PostSource,
        embedder: Embedder,
        options: BackfillOptions,
        restricted: frozenset[int],
        sleep: Callable[[float], None],
        tokenizer: Any | None,
        category_names: dict[int, str] | None = None,
    ) -> None:
        self.stores = tuple(stores)  # one writer connection each; a page is written by one of them
        self.reader = reader  # digest lookups from the reading thread, on a connection of its own
        self.source = source
        self.embedder = embedder
        self.options = options
        self.restricted = restricted
        self.sleep = sleep
        max_tokens = int(getattr(embedder, "max_tokens", 0) or options.max_tokens)
        # Never the embedder's own tokenizer: preparation runs beside the embedding threads, and a fast
        # tokenizer is not safe to share (backfill.compose.find_tokenizer gives a private one).
        self.preparer = Preparer(
            embedder.model, Truncator(max_tokens, tokenizer), options.excluded_authors, category_names
        )
        self.counts: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self.timings: dict[str, float] = dict.fromkeys(
            ("read", "prepare", "digest_lookup", "embed_wait", "write", "index_build"), 0.0
        )
        self.exhausted = False

    def stats(self) -> dict[str, float]:
        return {k: float(self.counts[k]) for k in ("seen", "embedded", "skipped", "removed", "failed")}

    def plan(self, batch: SourceBatch, pool: ThreadPoolExecutor, progress: Progress | None = None) -> _Page:
        t0 = time.perf_counter()
        existing = states_in(self.reader.conn, batch.lo, batch.hi)
        t1 = time.perf_counter()
        page = _Page(batch, [], [], [], 0, Counter(), fresh=not existing)
        for post in batch.posts:
            prepared = self.preparer.prepare(post, self.restricted)
            if isinstance(prepared, str):
                page.reasons[prepared] += 1
                continue
            page.keep.append(post.post_id)
            need = needs(prepared, existing.get(post.post_id))
            if need == "embed":
                page.to_embed.append(prepared)
            else:
                page.skipped += 1
                if need == "rewrite":  # same text, another author or place: no embedding
                    page.rewritten.append(prepared)
        # Similar lengths in one request: a model pads a batch to its longest text, so a page sorted by
        # length costs far less compute than the same page in id order (measured ~2-3x with MiniLM).
        page.to_embed.sort(key=lambda p: len(p.text))
        size = self.options.batch_size
        if progress is not None and len(batch.posts) > len(page.to_embed):
            # what needs no embedding (unchanged, ineligible) is done as soon as it is read
            progress.advance(len(batch.posts) - len(page.to_embed), skipped=page.skipped)
        for start in range(0, len(page.to_embed), size):
            texts = [p.text for p in page.to_embed[start : start + size]]
            fut = pool.submit(embed_batch, self.embedder, texts, policy=self.options.retry, sleep=self.sleep)
            if progress is not None:
                fut.add_done_callback(_advance_on(progress, len(texts)))
            page.futures.append((start, fut))
        self.timings["digest_lookup"] += t1 - t0
        self.timings["prepare"] += time.perf_counter() - t1
        return page

    def commit(
        self,
        page: _Page,
        *,
        checkpoint: bool = True,
        partial: bool = False,
        store: IndexStore | None = None,
        after: Future[None] | None = None,
    ) -> None:
        """Write a page; ``partial`` writes only its finished embeddings (no sweep, no checkpoint).

        ``after``: the write of the page before this one, on another connection. This page's rows are
        written meanwhile; its checkpoint and commit wait for that page's commit (and fail with it), so
        pages commit in source order and a checkpoint never passes a page that is not committed.
        """
        t0 = time.perf_counter()
        ok_posts: list[PreparedPost] = []
        blocks = []
        failed = 0
        for start, fut in page.futures:
            if partial and not _succeeded(fut):
                continue
            result = fut.result()
            failed += result.failed
            ok_posts.extend(page.to_embed[start + i] for i in result.ok)
            blocks.append(result.vectors)
        t1 = time.perf_counter()
        vectors = np.concatenate(blocks) if blocks else None
        batch = page.batch
        waited = 0.0

        def counts_now() -> dict[str, float]:
            nonlocal waited
            if after is not None:
                w0 = time.perf_counter()
                after.result()
                waited = time.perf_counter() - w0
            return {**self.stats(), "seen": self.counts["seen"] + len(batch.posts)}

        removed = (store or self.stores[0]).write_batch(
            ok_posts,
            vectors,
            lo=batch.lo if not partial else 1,
            hi=batch.hi if not partial else 0,  # an empty range: nothing swept
            keep=page.keep,
            source_key=self.source.key,
            cursor=batch.cursor if checkpoint and not partial else None,
            stats=counts_now,
            fresh=page.fresh and not partial,
            prune=self.options.prune,
            rewritten=page.rewritten if not partial else (),
            walk=self.source.walk() if isinstance(self.source, Watermarked) else None,
        )
        if partial:
            self.counts.update(embedded=len(ok_posts))
            return
        self.timings["embed_wait"] += t1 - t0
        # The writer's own time: what it waited for the page before it to commit is not counted twice.
        self.timings["write"] += time.perf_counter() - t1 - waited
        self.counts.update(
            seen=len(batch.posts),
            embedded=len(ok_posts),
            skipped=page.skipped,
            rewritten=len(page.rewritten),
            removed=removed,
            failed=failed,
            ineligible=sum(page.reasons.values()),
        )
        self.reasons.update(page.reasons)

    def batches(self, cursor: int | None) -> Iterator[SourceBatch]:
        """The source's batches, cut at ``--limit``; timed as the read stage."""
        left = self.options.limit
        it = iter(self.source.read(cursor, batch_size=self.options.page_size))
        while left is None or left > 0:
            t0 = time.perf_counter()
            batch = next(it, None)
            self.timings["read"] += time.perf_counter() - t0
            if batch is None:
                self.exhausted = True
                return
            if left is not None:
                if len(batch.posts) > left:
                    batch = _cut(batch, left)
                left -= len(batch.posts)
            yield batch

    def pump(self, cursor: int | None, progress: Progress | None) -> None:
        """Read and prepare pages here, embed them in the pool, write them on the writer connections.

        Each writer has its own connection and thread, and the pages go to them in turn: the database
        works on page k (COPY, the lexical column, the indexes) in one backend while another writes
        page k+1 and this thread prepares page k+2. Pages still commit in source order (``commit``'s
        ``after``); at most one page per writer is in flight, which keeps memory bounded.
        """
        pending: deque[_Page] = deque()
        in_flight: deque[tuple[_Page, Future[None]]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="embed")
        writer = ThreadPoolExecutor(max_workers=len(self.stores), thread_name_prefix="write")
        turn = 0

        def settle(keep: int) -> None:
            """Wait for the oldest writes until at most ``keep`` are in flight (a failed one raises)."""
            while len(in_flight) > keep:
                in_flight[0][1].result()
                in_flight.popleft()

        def hand_over() -> None:
            nonlocal turn
            page = pending[0]  # left there until handed over: a failure below salvages it
            # The oldest write's connection is the one whose turn comes next; a page whose range meets
            # one in flight (never, from a source keeping its contract) waits for every write.
            settle(0 if any(_overlaps(page, other) for other, _f in in_flight) else len(self.stores) - 1)
            pending.popleft()
            after = in_flight[-1][1] if in_flight else None
            store = self.stores[turn % len(self.stores)]
            turn += 1
            in_flight.append((page, writer.submit(self.commit, page, store=store, after=after)))

        try:
            for batch in self.batches(cursor):
                pending.append(self.plan(batch, pool, progress))
                # Keep about one page of embedding requests queued behind the ones being written.
                while pending and (len(pending) > 2 or all(f.done() for _s, f in pending[0].futures)):
                    hand_over()
            while pending:
                hand_over()
            settle(0)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            unwritten = []
            for page, fut in in_flight:  # let the commits in flight finish (or fail) first
                try:
                    fut.result()
                except BaseException:
                    unwritten.append(page)
            pending.extendleft(reversed(unwritten))
            self._salvage(pending)
            raise
        finally:
            pool.shutdown(wait=True)
            writer.shutdown(wait=True)

    def _salvage(self, pending: deque[_Page]) -> None:
        """After a failure, write every page whose embeddings finished, so they are never paid twice."""
        contiguous = True
        for page in pending:
            done = all(_succeeded(f) for _s, f in page.futures)
            try:
                self.commit(page, checkpoint=contiguous, partial=not done)
            except Exception:  # the original failure matters more
                log.exception("could not save a finished page after the failure")
                return
            contiguous = contiguous and done


def _advance_on(progress: Progress, n: int) -> Callable[[Future[EmbedResult]], None]:
    """A done-callback: ``n`` posts of one embedding batch are handled (failed or not)."""

    def done(fut: Future[EmbedResult]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            progress.advance(n, embedded=len(fut.result().ok))

    return done


def _overlaps(a: _Page, b: _Page) -> bool:
    return a.batch.lo <= b.batch.hi and b.batch.lo <= a.batch.hi


def _succeeded(fut: Future[EmbedResult]) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


def _cut(batch: SourceBatch, n: int) -> SourceBatch:
    posts = batch.posts[:n]
    ids = [p.post_id for p in posts]
    if batch.cursor == batch.hi:  # ascending: the page now ends at its last kept post
        return SourceBatch(posts, batch.lo, max(ids), max(ids))
    return SourceBatch(posts, min(ids), batch.hi, min(ids))


def run_backfill(
    database: DatabaseSettings,
    source: PostSource,
    embedder: Embedder,
    options: BackfillOptions = BackfillOptions(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    tokenizer: Any | None = None,
) -> Summary:
    """One backfill run of ``source`` into the post index (see docs/backfill.md)."""
    start = time.perf_counter()
    # A bulk load drops the vector index for its whole length, so it runs alone; a load into an empty
    # table is one too (there is nothing to keep, and building once is several times faster).
    bulk = options.bulk or options.reindex or _is_empty(database)
    with (
        BackfillLock(database.url, source.key, exclusive=bulk),
        connect(database) as conn,
        connect(database) as lookup_conn,
        ExitStack() as more,
    ):
        store = IndexStore(conn, embedder.model)
        if options.reindex:
            meta = read_index_meta(conn)
            log.info(
                "reindex: %s (%d-d) -> %s (%d-d)",
                meta.model,
                meta.dimension,
                embedder.model,
                embedder.dimension,
            )
            store.reindex(embedder.model, embedder.dimension, meta.strategy)
            conn.commit()
        else:
            try:
                check_index_meta(conn, embedder.model, embedder.dimension)
            finally:
                conn.rollback()
        build_s = 0.0
        live = store.count() > 0
        if not bulk and index_state(conn) != "valid":
            # A bulk load stopped before it could build the index (or a build failed): recall is on a
            # sequential scan until it exists again. Built first, while no bulk load can run (the lock).
            log.warning("the vector index is %s: building it before this run", index_state(conn))
            build_s = build_index(database.url, concurrently=live)
        # Read before the categories are recorded: a category now restricted takes its posts out, and
        # the walk must still start after them (``_since``).
        newest = store.newest_post_id()
        # The categories the source describes are recorded (a partial list never widens what is
        # public: backfill.categories); the posts of those recorded as restricted are not indexed.
        _record_categories(conn, source)
        restricted = restricted_ids(conn)

        checkpoint = store.load_checkpoint(source.key)
        resume = checkpoint is not None and checkpoint.status != "done" and checkpoint.cursor is not None
        cursor = checkpoint.cursor if resume and checkpoint else None
        if isinstance(source, Watermarked):
            saved = checkpoint.saved if checkpoint is not None else {}
            source.start(saved if resume else {"since": _since(newest, saved, options)}, full=options.full)
        store.start_run(source.key, fresh=not resume)
        if resume:
            log.info("resuming %s after post %s", source.key, cursor)

        remaining = _capped(source.estimate(cursor), options.limit)
        if bulk and index_state(conn) != "missing":
            drop_index(conn)

        reader = IndexStore(lookup_conn, embedder.model)
        # The other writers' connections: each page's rows cost the database more than preparing them
        # costs us (the lexical column), so two backends write at once.
        writers = [store] + [
            IndexStore(more.enter_context(connect(database)), embedder.model)
            for _ in range(options.writers - 1)
        ]
        run = _Run(writers, reader, source, embedder, options, restricted, sleep, tokenizer, names(conn))
        status = "failed"
        stopped: KeyboardInterrupt | None = None
        try:
            try:
                with Progress(
                    remaining,
                    interactive=options.progress,
                    every_s=options.progress_every_s,
                    first_s=min(3.0, options.progress_every_s),
                    label=source.key,
                ) as progress:
                    run.pump(cursor, progress)
                # What the source learnt while reading (the api source looks up the categories
                # /site.json lacks) is recorded too, so that their posts become citable now.
                _record_categories(conn, source)
                status = "done" if run.exhausted else "idle"
                t0 = time.perf_counter()
                if options.build_index and bulk:
                    build_s += build_index(database.url, concurrently=live)
                run.timings["index_build"] += time.perf_counter() - t0
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM made one by the CLI: resumable
                status, stopped = "interrupted", exc
        finally:
            summary = Summary(
                source=source.key,
                status=status,
                seen=run.counts["seen"],
                embedded=run.counts["embedded"],
                skipped=run.counts["skipped"],
                removed=run.counts["removed"],
                failed=run.counts["failed"],
                ineligible=run.counts["ineligible"],
                duration_s=round(time.perf_counter() - start, 3),
                resumed_from=cursor,
                index_build_s=round(build_s, 3),
                reasons=dict(run.reasons),
                timings={k: round(v, 3) for k, v in run.timings.items()},
                rewritten=run.counts["rewritten"],
                bulk=bulk,
            )
            try:
                conn.rollback()
                if bulk and index_state(conn) != "valid":
                    log.warning(
                        "the vector index is missing (recall scans the table) until the next backfill run "
                        "builds it: `citebot backfill --build-index`, or the scheduled incremental run"
                    )
                next_walk = source.next_walk() if isinstance(source, Watermarked) else None
                store.finish_run(source.key, status, summary.as_dict(), next_walk)
            except psycopg.Error:  # the database went away: the original error matters more
                log.warning("could not record the outcome of the run", exc_info=True)
                conn.close()  # unusable; closed, the block's end does not commit on it
            if stopped is not None:
                # Ctrl-C can land while the lookup connection waits on a query, leaving it busy: the
                # block's end would then fail to commit on it ("another command is already in progress")
                # and hide the interrupt. It holds no writes: close it.
                lookup_conn.close()
    # Each caller reports the summary once (the CLI prints it, the actor and the eval log it).
    log.debug("%s", summary.line())
    if stopped is not None:
        raise BackfillInterrupted(summary) from stopped
    return summary


def ensure_index(database: DatabaseSettings) -> float:
    """Build the vector index when it is missing or invalid, unless a bulk load is running (it builds
    the index when it ends); seconds spent. What every incremental run does first, on its own."""
    with BackfillLock(database.url, "build-index"), connect(database, vector=False) as conn:
        live = conn.execute("SELECT EXISTS (SELECT 1 FROM post_index)").fetchone() == (True,)
        conn.rollback()
        if index_state(conn) == "valid":
            return 0.0
        return build_index(database.url, concurrently=live)


def _is_empty(database: DatabaseSettings) -> bool:
    with connect(database, vector=False) as conn:
        return conn.execute("SELECT NOT EXISTS (SELECT 1 FROM post_index)").fetchone() == (True,)


def _record_categories(conn: psycopg.Connection, source: PostSource) -> None:
    listed = source.categories()
    if listed is not None:
        record(conn, listed, seen_by=source.key)


def _since(newest: int | None, saved: Mapping[str, object], options: BackfillOptions) -> int:
    """Where a watermarked walk starts: after the post its last completed walk listed; the first time,
    after the newest post already indexed (a db or file load filled the index: walking the whole forum
    again through the API would re-read every post at its request budget). ``--full`` ignores both."""
    since = saved.get("since")
    if since is not None or options.full:
        return int(str(since or 0))
    if newest:
        log.info(
            "no earlier walk of this source: reading posts after %d, the newest indexed post"
            " (--full reads the whole forum)",
            newest,
        )
    return newest or 0


def _capped(estimate: int | None, limit: int | None) -> int | None:
    """What this run will read at most: the source's estimate, cut at ``--limit``."""
    if limit is None:
        return estimate
    return limit if estimate is None else min(estimate, limit)


__all__ = ["BackfillInterrupted", "BackfillOptions", "Summary", "ensure_index", "run_backfill"]
