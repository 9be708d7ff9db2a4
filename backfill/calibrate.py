"""The run behind ``citebot calibrate`` (``worker/app/commands/calibrate.py`` parses and calls it): the
forum's solved topics read through the backfill's source, the questions built from them, then
``worker.calibration.run.calibrate`` against the index.

Reading: one pass over the source's posts (an export folder, a replica with the solved plugin's table,
or the API within the site-wide API budget at the backfill's priority, ``bulk``: answers and the index
refresh go first); only each topic's opening
post and its accepted answers are kept. A question is kept when one of its accepted answers is in the
index (citable, as the backfill decided): the others cannot be found whatever the weights.
Not resumable: a stopped run starts again (reading an export takes seconds, the questions minutes).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx

from backfill.compose import build_source
from backfill.sources import PostSource, SourcePost
from worker.calibration.questions import CalibrationQuestion, shipped_out_of_domain, solved_questions
from worker.calibration.run import NOT_DUE, Outcome, calibrate
from worker.calibration.store import figures_table
from worker.errors import ConfigError
from worker.protocols import Embedder
from worker.retrieval.eligibility import ELIGIBLE
from worker.settings import Settings

log = logging.getLogger(__name__)


def read_posts(source: PostSource, *, every: int = 5000) -> Iterator[SourcePost]:
    """Every post the source walks (in its order), progress logged every ``every`` posts."""
    n = 0
    started = time.perf_counter()
    for batch in source.read(None, batch_size=1000):
        for post in batch.posts:
            n += 1
            if n % every == 0:
                log.info("calibrate: %d posts read (%.0f s)", n, time.perf_counter() - started)
            yield post
    log.info("calibrate: %d posts read (%.0f s)", n, time.perf_counter() - started)


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


def run(settings: Settings, args: argparse.Namespace, *, embedder: Embedder | None = None) -> int:
    """Read, build, calibrate, print (and with ``args.out`` write) the outcome; ``embedder`` instead of
    the configured one (tests)."""
    from worker.db.connect import connect
    from worker.retrieval.factory import build_retriever
    from worker.retrieval.recall import single_connection

    started = time.perf_counter()
    source = open_source(settings, args)
    bot = settings.discourse.bot_username
    try:
        built = solved_questions(read_posts(source), bot_username=bot)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    requests = getattr(source, "requests", None)
    read_s = time.perf_counter() - started
    conn = connect(settings.database, autocommit=True)
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
        # The model clients (an HTTP embedder, TEI's reranker) share one client, as in the worker's
        # runtime; each sets its own timeout per request.
        with (
            httpx.Client(timeout=settings.discourse.timeout_s) as http,
            build_retriever(
                settings, connections=single_connection(conn), keyword=None, http=http, embedder=embedder
            ) as retriever,
        ):
            outcome = calibrate(
                retriever,
                conn,
                answerable,
                shipped_out_of_domain(bot),
                source=source.key,
                solved_topics=solved,
                force=args.force,
                min_topics=args.min_topics,
                if_new=getattr(args, "if_new", None),
                extra=extra,
            )
    finally:
        conn.close()
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
