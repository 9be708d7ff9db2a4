"""One calibration: collect the second stage's features, fit on one half, judge on the other, decide.

1. Every question (``worker.calibration.questions``: each solved topic's opening post and its short
   form, and the shipped out-of-domain questions) goes through the retriever's second stage under
   provisional weights (cosine alone: the candidate set, the first ``stage_k`` fused posts, does not
   depend on the weights), and every candidate's features are kept (``Collected``).
2. The fit half (a fixed hash of the topic id: a question's forms never cross halves) is fitted
   (``worker.calibration.fit.fit_model``: post, topic and abstention scores, zone thresholds).
3. The test half judges the new fit, the shipped weights and, when one is active, the calibration in
   use, on the same questions: topic@5 and post@5 of the answerable questions (long and short), the
   share of out-of-domain questions abstained on, the share of answerable ones abstained on, each with
   its 95 % Wilson interval, and one figure of merit (their mean, abstained answerable counted as
   ``1 − share``) that decides.
4. The new fit replaces what is in use only when its merit on the test half is at least that of what
   is in use (the active calibration, else the shipped weights), or with ``force``. Below
   ``min_topics`` solved topics nothing is fitted: the shipped weights stay. Every run is recorded
   (``worker.calibration.store``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import psycopg

from worker.calibration import store
from worker.calibration.fit import (
    Collected,
    FeatureRows,
    Fitted,
    abstained,
    answerable_only,
    candidate_rows,
    fit_model,
    provisional,
    question_hits,
    subset,
)
from worker.calibration.questions import CalibrationQuestion
from worker.calibration.work import SavedWork, context_key, index_identity, question_key
from worker.errors import CitebotError, ConfigError
from worker.retrieval.aggregate import thresholds_for
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.retrieval.stage import FEATURES, StageModel, load_model, model_set_id
from worker.settings import EmbeddingsSettings

log = logging.getLogger(__name__)

# Fewer solved topics than this and the shipped weights stay: about half of them fit (each with its
# short form), half judge, and at 50 test topics a share's 95 % interval is already ±14 points.
MIN_SOLVED_TOPICS = 100
FLOOR_SOLVED_TOPICS = 20  # the lowest ``--min-topics`` accepted (tests, a trial on a small forum)
# A drop: the weights in use score this much less merit on a later run's test half than on their own
# (``Outcome.dropped``; the command exits 1, the worker's gauge feeds the alert CitebotCalibrationDropped).
DROP = 0.05
Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of the share ``k / n`` (95 % by default); (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def share(flags: np.ndarray) -> dict[str, Any]:
    k, n = int(np.asarray(flags, dtype=bool).sum()), len(flags)
    return {"value": round(k / n, 4) if n else None, "k": k, "n": n, "ci95": list(wilson(k, n))}


@dataclass(frozen=True, slots=True)
class Judged:
    """One model set's figures on the test half, and its per-question outcomes."""

    name: str
    figures: dict[str, Any]
    per_question: dict[str, dict[str, bool]] = field(default_factory=dict)

    @property
    def merit(self) -> float:
        return float(self.figures["merit"])


def judge(name: str, data: Collected, model: StageModel, abstain_below: float) -> Judged:
    """``model`` (with the zone threshold ``abstain_below``) on ``data`` (the test half)."""
    answerable = data.answerable_mask()
    short = np.asarray([q.endswith("/short") for q in data.questions])
    ans = answerable_only(data)
    hits = question_hits(ans, model) if len(ans.questions) else np.zeros((0, 3), dtype=bool)
    gone = abstained(data, model, abstain_below)
    ans_short = short[answerable]
    figures: dict[str, Any] = {}
    for slice_name, mask in (
        ("all", np.ones(len(ans.questions), bool)),
        ("long", ~ans_short),
        ("short", ans_short),
    ):
        figures[slice_name] = {
            "topic@5": share(hits[mask, 1]),
            "post@5": share(hits[mask, 0]),
            "cited_accepted@5": share(hits[mask, 2]),
            "abstained": share(gone[answerable][mask]),
        }
    figures["ood"] = {"abstained": share(gone[~answerable])}
    parts = [
        figures["all"]["topic@5"]["value"],
        figures["all"]["post@5"]["value"],
        figures["ood"]["abstained"]["value"],
        None if figures["all"]["abstained"]["value"] is None else 1 - figures["all"]["abstained"]["value"],
    ]
    known = [p for p in parts if p is not None]
    figures["merit"] = round(sum(known) / len(known), 4) if known else 0.0
    per_question: dict[str, dict[str, bool]] = {}
    for qi, qid in enumerate(ans.questions):
        per_question[qid] = {"post@5": bool(hits[qi, 0]), "topic@5": bool(hits[qi, 1])}
    for qi, qid in enumerate(data.questions):
        per_question.setdefault(qid, {})["abstained"] = bool(gone[qi])
    return Judged(name, figures, per_question)


class CollectInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, made one by the CLI) while the questions were asked.

    A ``KeyboardInterrupt``, so that whatever stops on Ctrl-C still stops; it says how far the run got.
    The questions collected are saved (``worker.calibration.work``): the same command continues."""

    def __init__(self, model_set: str, total: int, done: int, asked: int, reused: int, failed: int) -> None:
        super().__init__(f"interrupted after {done} of {total} questions")
        self.model_set = model_set
        self.total = total
        self.done = done
        self.asked = asked
        self.reused = reused
        self.failed = failed
        self.questions: dict[str, Any] = {}  # the run's counts (``calibrate`` fills them in)

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "done": self.done,
            "asked": self.asked,
            "reused": self.reused,
            "failed": self.failed,
        }


# Called once per question as it is done: whether its saved work was reused (True) or it was asked.
OnQuestion = Callable[[bool], None]


def collect(
    retriever: Retriever,
    questions: Sequence[CalibrationQuestion],
    model_set: str,
    *,
    excerpt: bool,
    cross_encoder: bool = False,
    work: SavedWork | None = None,
    on_question: OnQuestion | None = None,
) -> tuple[Collected, list[str], dict[str, int]]:
    """Every question through the second stage under provisional weights, each candidate's features
    kept (``Collected``); the ids of the questions retrieval failed on (left out) come second, then
    the counts (``asked``, ``reused``). With ``work``, a question saved by an earlier run under the same
    conditions is not asked again, and each question asked is saved at once; a failed one is not
    (the next run asks it again). Ctrl-C raises ``CollectInterrupted``."""
    retriever.use_stage_model(provisional(model_set))
    route = Route(ranker="stage", excerpt=excerpt, cross_encoder=cross_encoder)
    saved = work.load() if work is not None else {}
    rows = FeatureRows()
    failed: list[str] = []
    asked = reused = 0
    try:
        for q in questions:
            key = question_key(q)
            got = saved.get(key)
            was_saved = got is not None
            if got is None:
                try:
                    result = retriever.retrieve(q.text, exclude_post_ids=q.exclude_post_ids, route=route)
                except CitebotError as exc:
                    log.warning("calibrate: question %s left out: %s", q.id, exc)
                    failed.append(q.id)
                    if on_question is not None:
                        on_question(False)
                    continue
                topics = (q.topic_id,) if q.topic_id is not None else ()
                got = candidate_rows(q.gold_post_ids, topics, result)
                if work is not None:
                    work.save(q, key, got)
                asked += 1
            else:
                reused += 1
            rows.extend(q.id, q.answerable, got)
            if on_question is not None:
                on_question(was_saved)
    except KeyboardInterrupt as exc:
        raise CollectInterrupted(
            model_set, len(questions), asked + reused + len(failed), asked, reused, len(failed)
        ) from exc
    return rows.collected(), failed, {"asked": asked, "reused": reused}


NOT_DUE = "not_due"  # --if-new: too few new solved topics since the last run; nothing recorded


@dataclass(slots=True)
class Outcome:
    """What a run decided, and why: what ``citebot calibrate`` prints and records."""

    model_set: str
    decision: str
    reason: str
    questions: dict[str, Any]
    figures: dict[str, Any]
    record: store.Calibration | None = None
    fitted: Fitted | None = None
    per_question: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def dropped(self) -> bool:
        """The weights that stay in use lost more than ``DROP`` of merit since they were fitted
        (``active_check``); a new fit that replaced them ends the drop."""
        check = self.figures.get("active_check") or {}
        return self.decision == store.KEPT_ACTIVE and bool(check.get("dropped"))


def model_set_of(retriever: Retriever) -> tuple[str, bool, bool]:
    """The model set the worker's second stage uses with this retriever, whether it includes the
    second bi-encoder's excerpt cosine, and whether the cross-encoder's logit (a TEI cross-encoder is
    configured: its id ends the model set's, ``+ce:<id>``)."""
    excerpt = retriever.excerpts is not None and retriever.excerpt_embedder is not None
    if retriever.embedder is None:
        raise ConfigError("calibrate needs the embedder (CITEBOT_EMBEDDINGS__*)")
    second = retriever.excerpt_embedder.model if excerpt and retriever.excerpt_embedder is not None else None
    ce = retriever.cross_encoder_id()
    return model_set_id(retriever.embedder.model, second, ce), excerpt, ce is not None


def shipped(model_set: str) -> tuple[StageModel, float] | None:
    """The shipped weights of ``model_set`` and their zone threshold, as the worker reads them."""
    try:
        model = load_model(model_set)
    except ConfigError:
        return None
    return model, thresholds_for(model.scorer_id).abstain_below


def reference_weights(*, excerpt: bool) -> tuple[str, StageModel, float] | None:
    """For a model set the project ships no weights for (and without the excerpt cosine): the shipped
    weights of the default model set, judged beside the new fit so that the report shows what fitting
    to this model set changed. Never a candidate for the decision."""
    if excerpt:
        return None
    default = model_set_id(EmbeddingsSettings.model_fields["model"].default)
    ship = shipped(default)
    return None if ship is None else (default, *ship)


def decide(new: float, old: float | None, in_use: str | None, *, force: bool) -> tuple[str, str]:
    """Whether the new fit (merit ``new`` on the test half) replaces the ``in_use`` weights (merit
    ``old`` on the same questions; None: nothing in use), and why: it does when it is at least as good,
    or with ``force``."""
    if old is None:
        return store.ACTIVATED, "no weights were in use for this model set"
    if new >= old:
        return store.ACTIVATED, (
            f"the new fit's merit on the test half, {new:.4f}, is at least that of the {in_use} weights "
            f"({old:.4f})"
        )
    if force:
        return (
            store.FORCED,
            f"--force: the {in_use} weights did better on the test half ({old:.4f} > {new:.4f})",
        )
    return store.KEPT_ACTIVE, (
        f"the {in_use} weights did better on the test half ({old:.4f} > {new:.4f}): they stay "
        "(--force replaces them)"
    )


def calibrate(
    retriever: Retriever,
    conn: psycopg.Connection,
    answerable: Sequence[CalibrationQuestion],
    out_of_domain: Sequence[CalibrationQuestion],
    *,
    source: str,
    solved_topics: int,
    force: bool = False,
    min_topics: int = MIN_SOLVED_TOPICS,
    if_new: int | None = None,
    extra: Mapping[str, Any] | None = None,
    resume: bool = True,
    on_question: OnQuestion | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Outcome:
    """The whole run (module docstring); the outcome is recorded in ``stage_calibrations``.

    Each question's features are saved as they are collected (``worker.calibration.work``): a run
    that was stopped is continued, its saved questions not asked again (``resume`` False: asked
    again); ``on_question`` is called as each question is done (progress). Ctrl-C while the questions
    are asked raises ``CollectInterrupted``; the caller records it (``record_interrupted``).

    ``if_new`` (the nightly job): when the model set's last recorded run counted fewer than ``if_new``
    solved topics less than now, nothing is fitted or recorded (decision ``not_due``)."""
    if min_topics < FLOOR_SOLVED_TOPICS:
        raise ConfigError(f"--min-topics must be at least {FLOOR_SOLVED_TOPICS}")
    started = clock()
    model_set, excerpt, ce = model_set_of(retriever)
    counts: dict[str, Any] = {
        "solved_topics": solved_topics,
        "min_topics": min_topics,
        "answerable": {h: sum(q.half == h for q in answerable) for h in ("fit", "test")},
        "out_of_domain": {h: sum(q.half == h for q in out_of_domain) for h in ("fit", "test")},
        **(extra or {}),
    }
    if if_new is not None:
        last = store.history(conn, model_set, limit=1, finished=True)
        before = int(last[0].questions.get("solved_topics", 0)) if last else None
        if before is not None and solved_topics - before < if_new:
            reason = (
                f"{solved_topics - before} new solved topics since the run of "
                f"{last[0].fitted_at:%Y-%m-%d %H:%M} UTC ({before}), fewer than --if-new {if_new}: "
                "nothing fitted"
            )
            return Outcome(model_set, NOT_DUE, reason, counts, {}, seconds=clock() - started)
    if solved_topics < min_topics:
        reason = (
            f"{solved_topics} solved topics (topics with an accepted answer) is below the minimum of "
            f"{min_topics}: too few to fit and judge weights; the shipped weights stay"
        )
        row = store.record(
            conn,
            model_set=model_set,
            decision=store.TOO_LITTLE_DATA,
            source=source,
            questions=counts,
            figures={"reason": reason},
        )
        return Outcome(model_set, store.TOO_LITTLE_DATA, reason, counts, {}, row, seconds=clock() - started)

    questions = [*answerable, *out_of_domain]
    log.info(
        "calibrate %s: %d questions (%d solved topics, long and short forms; %d out of domain)",
        model_set,
        len(questions),
        solved_topics,
        len(out_of_domain),
    )
    work = SavedWork(
        conn,
        model_set,
        context_key(model_set, index_identity(conn), retriever.settings.model_dump(mode="json")),
    )
    if not resume:
        work.clear()
    elif kept := work.prepare():
        log.info("calibrate %s: %d questions saved by an interrupted run are reused", model_set, kept)
    try:
        data, failed, asked = collect(
            retriever,
            questions,
            model_set,
            excerpt=excerpt,
            cross_encoder=ce,
            work=work,
            on_question=on_question,
        )
    except CollectInterrupted as stopped:
        stopped.questions = {**counts, "progress": stopped.as_dict()}
        raise
    counts["failed"] = failed
    counts["collected"] = asked
    collected_s = clock() - started
    half = {q.id: q.half for q in questions}
    in_fit = np.asarray([half[q] == "fit" for q in data.questions])
    fit_half, test_half = subset(data, in_fit), subset(data, ~in_fit)
    features = tuple(f for f in FEATURES if (excerpt or f != "excerpt_cosine") and (ce or f != "ce_logit"))
    fit_half = replace(fit_half, meta={"data": f"{solved_topics} solved topics ({source}), fit half"})
    fitted = fit_model(fit_half, model_set, features=features)

    judged = {"calibrated": judge("calibrated", test_half, fitted.model, fitted.abstain_below)}
    ship = shipped(model_set)
    if ship is not None:
        judged["shipped"] = judge("shipped", test_half, *ship)
    reference = None if ship is not None else reference_weights(excerpt=excerpt)
    if reference is not None:
        # Not a candidate: what the project's own weights, fitted for another model set, do here.
        judged["reference"] = judge("reference", test_half, *reference[1:])
    current = store.active(conn, model_set)
    if current is not None and current.model is not None and current.abstain_below is not None:
        judged["active"] = judge("active", test_half, current.model, current.abstain_below)
    in_use = "active" if "active" in judged else "shipped" if "shipped" in judged else None
    check = active_check(current, judged.get("active"))
    decision, reason = decide(
        judged["calibrated"].merit, judged[in_use].merit if in_use else None, in_use, force=force
    )
    figures: dict[str, Any] = {
        "test_half": {name: j.figures for name, j in judged.items()},
        "in_use_before": in_use,
        **({"reference_model_set": reference[0]} if reference is not None else {}),
        "fit": fitted.figures,
        "collect_s": round(collected_s, 1),
        "seconds": round(clock() - started, 1),
        "interval": "95 % Wilson score interval of each share",
        "merit": "mean of topic@5, post@5 (answerable, long and short), out-of-domain abstained and "
        "1 - answerable abstained, on the test half",
        "reason": reason,
    }
    if check is not None:
        figures["active_check"] = check
    row = store.record(
        conn,
        model_set=model_set,
        decision=decision,
        source=source,
        questions=counts,
        figures=figures,
        model=fitted.model,
        abstain_below=fitted.abstain_below,
        weak_below=fitted.weak_below,
    )
    work.clear()  # recorded: the next run asks every question again
    per_question = {
        qid: {"half": half[qid], **{name: j.per_question.get(qid, {}) for name, j in judged.items()}}
        for qid in data.questions
    }
    return Outcome(
        model_set, decision, reason, counts, figures, row, fitted, per_question, seconds=clock() - started
    )


def record_interrupted(
    conn: psycopg.Connection, stopped: CollectInterrupted, *, source: str
) -> store.Calibration:
    """Record a run stopped while its questions were asked (decision ``interrupted``): how far it got
    and that the same command continues it. Nothing else changes (the weights in use stay)."""
    reason = (
        f"interrupted after {stopped.done} of {stopped.total} questions ({stopped.asked} asked by this run, "
        f"{stopped.reused} saved before): run the same command again to continue"
    )
    return store.record(
        conn,
        model_set=stopped.model_set,
        decision=store.INTERRUPTED,
        source=source,
        questions=stopped.questions or {"progress": stopped.as_dict()},
        figures={"reason": reason},
    )


def active_check(current: store.Calibration | None, now: Judged | None) -> dict[str, Any] | None:
    """The weights in use measured again: their merit on their own run's test half (``at_fit``) and on
    this run's (``now``), and whether that is a drop (``DROP``). None without active weights."""
    if current is None or now is None:
        return None
    at_fit = (current.figures.get("test_half") or {}).get("calibrated", {}).get("merit")
    if at_fit is None:
        return None
    drop = float(at_fit) - now.merit
    return {
        "calibration": current.id,
        "at_fit": round(float(at_fit), 4),
        "now": round(now.merit, 4),
        "dropped": drop > DROP,
    }
