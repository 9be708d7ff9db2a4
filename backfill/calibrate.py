"""The run behind ``citebot calibrate`` (``worker/app/commands/calibrate.py`` parses and calls it): the
forum's solved topics read through the backfill's source, the questions built from them, then
``worker.calibration.run.calibrate`` against the index.

Reading: one pass over the source's posts (an export folder, a replica with the solved plugin's table,
or the API within the site-wide API budget at the backfill's priority, ``bulk``: answers and the index
refresh go first); only each topic's opening
post and its accepted answers are kept. A question is kept when one of its accepted answers is in the
index (citable, as the backfill decided): the others cannot be found whatever the weights.

Progress is shown as the backfill shows it (``backfill.progress.Progress``: a bar on a terminal, a log
line every ``--progress-every`` seconds otherwise), for the read (posts) and for the questions.

Both phases are saved as they go. The read (``worker.calibration.read``): after each batch the source
yields, the posts kept and the source's cursor; Ctrl-C or SIGTERM while reading exits 130, and the same
command continues the read from there (its progress counts the posts left) instead of walking the forum
again. The questions' work (``worker.calibration.work``): Ctrl-C or SIGTERM while they are asked prints
one summary, records the run as ``interrupted`` and exits 130, and the same command continues without
reading the forum or asking the saved questions again. A run that ends deletes its saved read.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import psycopg

from backfill.compose import build_source
from backfill.progress import Progress
from backfill.sources import PostSource, SourcePost
from worker.calibration.questions import CalibrationQuestion, shipped_out_of_domain, solved_questions
from worker.calibration.read import KeptPost, ReadState, SavedRead, kept
from worker.calibration.run import NOT_DUE, CollectInterrupted, Outcome, calibrate, record_interrupted
from worker.calibration.store import figures_table
from worker.errors import CitebotError, ConfigError
from worker.protocols import Embedder, Reranker
from worker.retrieval.eligibility import ELIGIBLE
from worker.settings import Settings

log = logging.getLogger(__name__)

READ_BATCH = 1000  # posts a batch asks of the source (the API's page is what Discourse returns: 50)


def read_posts(source: PostSource, progress: Progress | None = None) -> Iterator[SourcePost]:
    """Every post the source walks (in its order), ``progress`` advanced per batch."""
    n = 0
    started = time.perf_counter()
    for batch in source.read(None, batch_size=READ_BATCH):
        for post in batch.posts:
            n += 1
            yield post
        if progress is not None:
            progress.advance(len(batch.posts))
    log.info("calibrate: %d posts read (%.0f s)", n, time.perf_counter() - started)


def read_kept(
    source: PostSource,
    saved: SavedRead,
    state: ReadState | None,
    progress: Progress | None = None,
    *,
    batch_size: int = READ_BATCH,
) -> tuple[list[KeptPost], int | None]:
    """The posts the questions are built from (``kept``), read from the source past the saved
    ``state``'s cursor (from the start without one; not at all once it is ``done``), each batch's
    kept posts saved with its cursor as soon as it is read; and the read's API requests so far (None
    for a source that makes none). ``progress`` counts the posts this call reads."""
    posts = saved.load() if state is not None else []
    before = (state.requests or 0) if state is not None else 0

    def requests() -> int | None:  # the read's API requests: the stopped runs' and this one's
        made = getattr(source, "requests", None)
        return None if made is None else before + int(made)

    if state is not None and state.done:
        return posts, requests()
    cursor = state.cursor if state is not None else None
    n = state.posts_read if state is not None else 0
    started = time.perf_counter()
    for batch in source.read(cursor, batch_size=batch_size):
        new = [k for k in map(kept, batch.posts) if k is not None]
        n += len(batch.posts)
        cursor = batch.cursor
        saved.save(new, cursor=cursor, read=n, requests=requests())
        posts.extend(new)
        if progress is not None:
            progress.advance(len(batch.posts))
    saved.save((), cursor=cursor, read=n, requests=requests(), done=True)
    log.info(
        "calibrate: %d posts read (%.0f s in this run), %d kept",
        n,
        time.perf_counter() - started,
        len(posts),
    )
    return posts, requests()


def _progress(args: argparse.Namespace, total: int | None, label: str, unit: str, **kw: Any) -> Progress:
    every = getattr(args, "progress_every", None)
    every = 30.0 if every is None else max(0.0, float(every))
    mode = getattr(args, "progress", "auto") or "auto"
    return Progress(
        total,
        interactive={"auto": None, "bar": True, "log": False}[mode],
        every_s=every,
        first_s=min(3.0, every),
        label=label,
        unit=unit,
        **kw,
    )


def indexed(conn: Any, questions: list[CalibrationQuestion]) -> list[CalibrationQuestion]:
    """``questions`` with their gold narrowed to the posts the index may cite now (indexed, in a public
    category: ``ELIGIBLE``); those left with none dropped, as no weights can find them."""
    ids = sorted({p for q in questions for p in q.gold_post_ids})
    rows = (
        conn.execute(
            f"SELECT p.post_id FROM post_index p WHERE p.post_id = ANY(%s) AND {ELIGIBLE}",  # noqa: S608
            (ids,),
        ).fetchall()
        if ids
        else []
    )
    have = {int(r[0]) for r in rows}
    out = []
    for q in questions:
        gold = tuple(p for p in q.gold_post_ids if p in have)
        if gold:
            out.append(replace(q, gold_post_ids=gold))
    return out


def open_source(settings: Settings, args: argparse.Namespace) -> PostSource:
    """The backfill's source named by ``args``; a replica is asked for the solved plugin's accepted
    answers too (``DbSource(accepted=True)``)."""
    if args.source == "db":
        from backfill.sources.db import DbSource

        if not getattr(args, "database_url_source", None):
            raise ConfigError("--source db needs --database-url-source URL (the Discourse replica)")
        return DbSource(
            args.database_url_source, connect_timeout_s=settings.database.connect_timeout_s, accepted=True
        )
    return build_source(args.source, settings, path=args.path)


def run(
    settings: Settings,
    args: argparse.Namespace,
    *,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    read_batch: int = READ_BATCH,
) -> int:
    """Read, build, calibrate, print (and with ``args.out`` write) the outcome; ``embedder`` and
    ``reranker`` instead of the configured ones, ``read_batch`` posts asked of the source per batch
    (tests)."""
    from worker.db.connect import connect
    from worker.retrieval.factory import build_retriever
    from worker.retrieval.recall import single_connection

    started = time.perf_counter()
    source = open_source(settings, args)
    bot = settings.discourse.bot_username
    try:
        conn = connect(settings.database, autocommit=True)
    except BaseException:
        _close(source)
        raise
    saved = SavedRead(conn, source.key)
    try:
        posts, requests = _read(source, saved, args, read_batch)
    except KeyboardInterrupt:
        conn.close()
        print(
            "citebot: interrupted while reading the forum; what was read is saved: run the same command "
            "again to continue the read",
            file=sys.stderr,
        )
        return 130
    except BaseException:
        conn.close()
        raise
    finally:
        _close(source)
    built = solved_questions(posts, bot_username=bot)
    read_s = time.perf_counter() - started
    stopped: CollectInterrupted | None = None
    try:
        answerable = indexed(conn, built)
        solved = len({q.topic_id for q in answerable})
        extra: dict[str, Any] = {
            "solved_topics_read": len({q.topic_id for q in built}),
            "solved_topics_not_indexed": len({q.topic_id for q in built}) - solved,
            "read_s": round(read_s, 1),
        }
        if requests is not None:
            extra["api_requests"] = requests
        log.info(
            "calibrate: %d solved topics read (%s), %d with an accepted answer in the index%s",
            extra["solved_topics_read"],
            source.key,
            solved,
            f"; {requests} API requests" if requests is not None else "",
        )
        out_of_domain = shipped_out_of_domain(bot)
        # The model clients (an HTTP embedder, TEI's reranker) share one client, as in the worker's
        # runtime; each sets its own timeout per request.
        with (
            httpx.Client(timeout=settings.discourse.timeout_s) as http,
            build_retriever(
                settings,
                connections=single_connection(conn),
                keyword=None,
                http=http,
                embedder=embedder,
                reranker=reranker,
            ) as retriever,
            _progress(
                args,
                len(answerable) + len(out_of_domain),
                "calibrate: questions",
                "question",
                counted=("asked", "saved"),
            ) as bar,
        ):
            outcome = calibrate(
                retriever,
                conn,
                answerable,
                out_of_domain,
                source=source.key,
                solved_topics=solved,
                force=args.force,
                min_topics=args.min_topics,
                if_new=getattr(args, "if_new", None),
                extra=extra,
                resume=not getattr(args, "restart", False),
                on_question=lambda reused: bar.advance(1, embedded=int(not reused), skipped=int(reused)),
            )
        saved.clear()  # the run is over: the next one reads the forum again
    except CollectInterrupted as exc:
        stopped = exc
    finally:
        conn.close()
    if stopped is not None:
        return _interrupted(settings, stopped, source.key, as_json=args.json)
    outcome.seconds = time.perf_counter() - started
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(as_json(outcome), indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps({k: v for k, v in as_json(outcome).items() if k != "per_question"}))
    else:
        print_outcome(outcome)
    if outcome.dropped:
        log.warning(
            "calibrate %s: the weights in use dropped (%s)",
            outcome.model_set,
            outcome.figures["active_check"],
        )
        return 1
    return 0


def _read(
    source: PostSource, saved: SavedRead, args: argparse.Namespace, batch_size: int
) -> tuple[list[KeptPost], int | None]:
    """The read of ``run``: the saved one continued (or discarded with ``--restart``), progress shown
    for the posts left."""
    if getattr(args, "restart", False):
        saved.clear()
    state = saved.prepare()
    label = f"calibrate: reading {source.key}"
    total: int | None
    if state is not None and state.done:
        log.info("%s: read to its end by a stopped run (%d posts), not read again", label, state.posts_read)
        total = 0
    elif state is not None:
        log.info("%s: continuing after post %s (%d posts read before)", label, state.cursor, state.posts_read)
        total = source.estimate(state.cursor)
    else:
        total = source.estimate(None)
    with _progress(args, total, label, "post") as bar:
        return read_kept(source, saved, state, bar, batch_size=batch_size)


def _close(source: PostSource) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def _interrupted(settings: Settings, stopped: CollectInterrupted, source: str, *, as_json: bool) -> int:
    """Ctrl-C or SIGTERM while the questions were asked: recorded (on a new connection: the run's may
    have been interrupted mid-query), one summary printed, 130."""
    from worker.db.connect import connect

    record_id: int | None = None
    reason = f"interrupted after {stopped.done} of {stopped.total} questions"
    try:
        with connect(settings.database, autocommit=True) as conn:
            row = record_interrupted(conn, stopped, source=source)
        record_id, reason = row.id, str(row.figures["reason"])
    except (CitebotError, psycopg.Error):  # the database went away: the interrupt matters more
        log.warning("could not record the interrupted run", exc_info=True)
    if as_json:
        print(
            json.dumps(
                {
                    "model_set": stopped.model_set,
                    "decision": "interrupted",
                    "reason": reason,
                    "record_id": record_id,
                    "progress": stopped.as_dict(),
                }
            )
        )
    else:
        print(f"model set {stopped.model_set}: interrupted")
        print(f"  {reason}")
    print(
        "citebot: interrupted; the questions done are saved: run the same command again to resume",
        file=sys.stderr,
    )
    return 130


def as_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "model_set": outcome.model_set,
        "decision": outcome.decision,
        "reason": outcome.reason,
        "record_id": outcome.record.id if outcome.record else None,
        "seconds": round(outcome.seconds, 1),
        "questions": outcome.questions,
        "figures": outcome.figures,
        "model": outcome.fitted.model.as_dict() if outcome.fitted else None,
        "thresholds": {"abstain_below": outcome.fitted.abstain_below, "weak_below": outcome.fitted.weak_below}
        if outcome.fitted
        else None,
        "per_question": outcome.per_question,
    }


def print_outcome(outcome: Outcome) -> None:
    q = outcome.questions
    print(f"model set {outcome.model_set}: {outcome.decision}")
    print(f"  {outcome.reason}")
    if outcome.decision == NOT_DUE:
        return
    print(
        f"  {q['solved_topics']} solved topics in the index; questions fit/test: "
        f"{q['answerable']['fit']}/{q['answerable']['test']} answerable (long and short), "
        f"{q['out_of_domain']['fit']}/{q['out_of_domain']['test']} out of domain"
        + (f"; {q['api_requests']} API requests" if "api_requests" in q else "")
    )
    if outcome.figures.get("test_half"):
        for line in figures_table(outcome.figures["test_half"]):
            print(line)
        print(
            "  (95 % Wilson intervals; merit: mean of topic@5, post@5, out-of-domain abstained and "
            "1 - answerable abstained)"
        )
    print(f"  took {outcome.seconds:.0f} s")
