"""``python -m eval retrieval``: index an export, run every question through every configuration, report.

With no services configured (``CITEBOT_DATABASE__URL`` and ``CITEBOT_DISCOURSE__BASE_URL`` unset) it
starts the embedded defaults itself (``eval.stack.services.EmbeddedStack``). The export is indexed by the
backfill (incremental: a second run embeds nothing), then each question runs through each
configuration; the results go to ``OUT/results.json``, ``OUT/report.md`` and PNG plots.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.evaluation.configs import Config
from eval.evaluation.datasets import DatasetError, Question, fit_only, load_questions, with_short_forms
from eval.evaluation.evaluate import Collector, Outcome, abstention, run_questions, slices, summarize
from eval.evaluation.report import (
    abstention_table,
    configs_table,
    plot_configs,
    plot_latency,
    shapes_table,
    write_json,
)
from eval.evaluation.thresholds import calibrate, plot_calibration
from eval.stack.services import CACHE, EmbeddedStack, configured_settings, index_export
from worker.protocols import Embedder
from worker.retrieval.aggregate import thresholds_for, write_thresholds
from worker.retrieval.stage import StageModel
from worker.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetrievalRun:
    """What ``run_retrieval`` needs; ``cache`` holds the embedded PostgreSQL's data folder."""

    forum: Path | None
    questions: tuple[Path, ...]
    configs: tuple[Config, ...]
    out: Path
    cache: Path = CACHE / "eval-pg"
    warmup: int = 3
    limit: int | None = None
    services: str = "auto"  # auto: configured when CITEBOT_DATABASE__URL and DISCOURSE__BASE_URL are set
    server_url: str | None = None  # embedded services on this PostgreSQL server instead of ``cache``
    extra_meta: dict[str, Any] = field(default_factory=dict)
    short: bool = True  # add each answerable question's first sentence (``eval.datasets.short_form``)
    write_thresholds: bool = False  # record the thresholds calibrated on the fit half for this scorer
    half: str | None = None  # only the questions of this half (``fit`` / ``test``)
    fit_questions: tuple[Path, ...] = ()  # questions files wholly in the fit half (extra training data)
    stage_model: StageModel | None = None  # second-stage weights to use instead of the fitted ones
    collect: Collector | None = None  # sees every (question, configuration, result)
    # The second bi-encoder (a model id or folder, local): its column is filled before the questions
    # run, from ``excerpt_vectors`` (an eval-time cache, ``eval.evaluation.excerpt_cache``) when given.
    excerpt_model: str | None = None
    excerpt_dimension: int = 768
    excerpt_vectors: Path | None = None
    backfill: bool = True  # False: the index in ``cache`` is used as it is (a copy already filled)


def gold_positions(conn: Any, questions: Sequence[Question]) -> dict[int, tuple[int, int]]:
    """post_id → (topic_id, post_number) of every gold post that is in the index."""
    ids = sorted({p for q in questions for p in q.gold_post_ids})
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT post_id, topic_id, post_number FROM post_index WHERE post_id = ANY(%s)", (ids,)
    ).fetchall()
    return {int(r[0]): (int(r[1]), int(r[2])) for r in rows}


def index_size(conn: Any) -> int:
    return int(conn.execute("SELECT count(*) FROM post_index").fetchone()[0])


def evaluate_with(
    settings: Settings,
    run: RetrievalRun,
    questions: Sequence[Question],
    hidden: Callable[[Sequence[int]], AbstractContextManager[None]] | None = None,
    excerpt_embedder: Embedder | None = None,
) -> tuple[list[Outcome], dict[str, Any]]:
    """Run the questions against the services ``settings`` names (the index must be filled)."""
    import httpx

    from worker.clients.discourse import DiscourseClient
    from worker.db.connect import connect
    from worker.retrieval.factory import build_retriever
    from worker.retrieval.recall import single_connection

    http = httpx.Client(
        timeout=httpx.Timeout(max(settings.embeddings.timeout_s, settings.reranker.timeout_s))
    )
    conn = connect(settings.database, autocommit=True)
    try:
        gold = gold_positions(conn, questions)
        posts = index_size(conn)
        keyword = DiscourseClient(http, settings.discourse)
        with build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=keyword,
            http=http,
            excerpt_embedder=excerpt_embedder,
            calibrated=False,  # the shipped weights file, whatever `citebot calibrate` recorded here
        ) as retriever:
            if run.stage_model is not None:
                retriever.use_stage_model(run.stage_model)
            stage_scorer = (
                retriever.stage_model(excerpt=any(c.use_excerpt for c in run.configs)).scorer_id
                if any(c.use_stage for c in run.configs) and retriever.has_stage_weights()
                else None
            )
            full = next((c for c in run.configs if c.use_rerank and c.use_posts), run.configs[-1])
            for q in questions[: run.warmup]:  # models, connections and caches warm before timing
                retriever.retrieve(q.asked().text, exclude_post_ids=q.exclude_post_ids, route=full.route)
            started = time.perf_counter()

            def progress(i: int, n: int) -> None:
                if i % 25 == 0 or i == n:
                    log.info("%d/%d questions (%.0f s)", i, n, time.perf_counter() - started)

            outcomes = run_questions(
                retriever,
                questions,
                run.configs,
                gold,
                on_progress=progress,
                hidden=hidden,
                collect=run.collect,
            )
            info = {
                "posts_indexed": posts,
                "gold_posts_indexed": len(gold),
                "questions_s": round(time.perf_counter() - started, 1),
                "question_posts_hidden_from_forum": hidden is not None,
                "reranker": getattr(retriever.reranker, "name", None),
                "served_model": getattr(retriever.reranker, "served_model", None),
                "scorer": getattr(retriever.reranker, "reranker_id", None),
                "thresholds": asdict(retriever.thresholds()),
                "stage_scorer": stage_scorer,
                "shipped_ranker": retriever.ranker(),  # what ``shipped`` (ranker auto) resolved to
                "stage_thresholds": asdict(retriever.thresholds(stage_scorer)) if stage_scorer else None,
            }
    finally:
        conn.close()
        http.close()
    return outcomes, info


def fill_excerpt_column(settings: Settings, run: RetrievalRun) -> tuple[Settings, Embedder, dict[str, Any]]:
    """Settings naming the second bi-encoder, its embedder (through the eval's vector cache when
    ``run.excerpt_vectors`` is given) and the column filled by the backfill's own pass."""
    from backfill.excerpts import fill_excerpts
    from eval.evaluation.excerpt_cache import CachedEmbedder
    from worker.clients.embeddings import build_excerpt_embedder

    cfg = settings.excerpt_embeddings.model_copy(
        update={
            "provider": "local",
            "model": run.excerpt_model or "",
            "dimension": run.excerpt_dimension,
            "max_tokens": 384,
        }
    )
    settings = settings.model_copy(update={"excerpt_embeddings": cfg})
    live = build_excerpt_embedder(settings, None)
    if live is None:
        raise ValueError("no second bi-encoder named")
    embedder: Embedder = CachedEmbedder(live, run.excerpt_vectors) if run.excerpt_vectors else live
    summary = fill_excerpts(settings.database, embedder, excerpt_chars=settings.reranker.excerpt_chars)
    info: dict[str, Any] = {"excerpt_model": cfg.model, "excerpt_fill": summary.line()}
    if isinstance(embedder, CachedEmbedder):
        info["excerpt_cache"] = {
            "file": str(run.excerpt_vectors),
            "hits": embedder.hits,
            "misses": embedder.misses,
        }
    log.info("excerpt column: %s", summary.line())
    return settings, embedder, info


def build_results(
    outcomes: Sequence[Outcome], configs: Sequence[Config], settings: Settings, meta: dict[str, Any]
) -> dict[str, Any]:
    limits = meta.get("thresholds") or asdict(thresholds_for(None))
    abstain_below, weak_below = float(limits["abstain_below"]), float(limits["weak_below"])
    full = [o for o in outcomes if o.config == "posts+keyword+rerank"] or [
        o
        for o in outcomes
        if any(c.name == o.config and c.use_rerank and c.use_posts and not c.use_stage for c in configs)
    ]
    stage_limits = meta.get("stage_thresholds") or limits
    stage = [o for o in outcomes if any(c.name == o.config and c.use_stage for c in configs)]
    stage = [o for o in stage if o.config == (stage[0].config if stage else None)]
    return {
        "meta": meta,
        "configs": summarize(outcomes, configs),
        "slices": slices(outcomes, configs),
        "abstention": abstention(outcomes, configs, abstain_below, weak_below),
        "calibration": calibrate(full, abstain_below, weak_below),
        "stage_calibration": calibrate(
            stage, float(stage_limits["abstain_below"]), float(stage_limits["weak_below"])
        )
        if stage
        else {},
        "per_question": [o.as_dict() for o in outcomes],
    }


def write_report(results: dict[str, Any], out: Path) -> list[Path]:
    """results.json, report.md and the plots in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", results)
    plots = [plot_configs(results["configs"], out / "configs.png")]
    names = list(results["configs"])
    plots.append(plot_latency(results["per_question"], names, out / "latency.png"))
    cal = results.get("calibration") or {}
    if cal.get("answerable_n"):
        plots.append(plot_calibration(cal, out / "zones.png"))
    (out / "report.md").write_text(render_markdown(results, [p.name for p in plots]), encoding="utf-8")
    return [out / "results.json", out / "report.md", *plots]


def render_markdown(results: dict[str, Any], plots: Sequence[str]) -> str:
    meta = results["meta"]
    cal = results.get("calibration") or {}
    lines = [
        f"# Retrieval eval — {meta.get('date', '')}",
        "",
        f"Forum export `{meta.get('forum')}` ({meta.get('posts_indexed')} posts indexed); questions "
        f"{', '.join(f'`{q}`' for q in meta.get('questions', []))} ({meta.get('answerable')} answerable, "
        f"{meta.get('out_of_domain')} out of domain). Embedder {meta.get('embedder')}, reranker "
        f"{meta.get('reranker')}; services: {meta.get('services')}. Backfill: {meta.get('backfill')}.",
        "",
        "## Configurations",
        "",
        configs_table(results["configs"]),
        "",
        "Topic hit@k: a gold topic among the first k distinct topics (the sources). Post hit@k: a gold post "
        "among the first k candidates. recall@25: a gold post among the 25 candidates the reranker reads. "
        "evidence hit@5: a gold post among the first 5 sources or their neighbour context. Latency: one "
        "`retrieve()` call, question-major order (a reranked text is cached for the next configuration).",
        "",
    ]
    shapes = shapes_table(results.get("slices") or {})
    if shapes:
        lines += [
            "## Conversation shapes (each apart, both halves)",
            "",
            shapes,
            "",
            "Each question asked as the worker builds it from its conversation (`worker.question`): the "
            "member's words, the topic's title, the thread, a follow-up's earlier question.",
            "",
        ]
    if results.get("abstention"):
        lines += ["## Abstention (out-of-domain questions)", "", abstention_table(results["abstention"]), ""]
    if cal.get("answerable_n"):
        lines += ["## Zone calibration (full pipeline, top-1 rerank logit)", "", *calibration_lines(cal), ""]
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def calibration_lines(cal: dict[str, Any]) -> list[str]:
    cur, prop = cal["current"], cal["proposed"]
    return [
        f"Answerable: n = {cal['answerable_n']}, top-1 logit median {cal['answerable_median']:.2f}; "
        f"out of domain: n = {cal['ood_n']}, median {cal['ood_median']:.2f}.",
        "",
        "| thresholds | abstain_below | weak_below | OOD abstained (recall) | precision "
        "| answerable abstained | normal zone: top-1 topic right |",
        "|---|---|---|---|---|---|---|",
        f"| current | {cur['abstain_below']:.2f} | {cur['weak_below']:.2f} | {cur['ood_recall']:.3f} | "
        f"{cur['precision']:.3f} | {cur['answerable_abstained_rate']:.3f} | {cur['normal_precision']:.3f} |",
        f"| proposed | {prop['abstain_below']:.2f} | {prop['weak_below']:.2f} | {prop['ood_recall']:.3f} | "
        f"{prop['precision']:.3f} | {prop['answerable_abstained_rate']:.3f} | "
        f"{prop['normal_precision']:.3f} |",
        "",
        cal.get("method", ""),
    ]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_retrieval(run: RetrievalRun) -> dict[str, Any]:
    """Index, evaluate, write the report; returns the results (also in ``run.out/results.json``)."""
    # A stable interleaved order (by a hash of the id): an interrupted run still reports a fair mix of
    # the files' questions, out-of-domain ones included.
    loaded = load_questions(list(run.questions))
    if run.fit_questions:
        loaded += fit_only(load_questions(list(run.fit_questions)))
        if len({q.id for q in loaded}) != len(loaded):
            raise DatasetError("a --fit-questions id is also in --questions")
    questions = sorted(
        with_short_forms(loaded) if run.short else loaded,
        key=lambda q: hashlib.sha256(q.id.encode()).digest(),
    )
    if run.half is not None:
        questions = [q for q in questions if q.half == run.half]
    if run.limit is not None:
        questions = questions[: run.limit]
    configured = configured_settings() if run.services != "embedded" else None
    if configured is None and run.services == "configured":
        raise ValueError("--services configured needs CITEBOT_DATABASE__URL and CITEBOT_DISCOURSE__BASE_URL")
    stack: EmbeddedStack | None = None
    try:
        if configured is None:
            if run.forum is None:
                raise ValueError("the embedded services need --forum DIR (an export to index and search)")
            stack = EmbeddedStack(run.forum, cache=run.cache, server_url=run.server_url)
            settings = stack.start().settings
        else:
            settings = configured
        t0 = time.perf_counter()
        backfill, embedded, skipped = "not run (the configured index is used as it is)", 0, 0
        if run.forum is not None and run.backfill:
            local = configured is None or settings.embeddings.provider == "local"
            summary = index_export(settings, run.forum, local=local)
            backfill, embedded, skipped = summary.line(), summary.embedded, summary.skipped
            log.info("index ready in %.1f s", time.perf_counter() - t0)
        excerpt_embedder: Embedder | None = None
        excerpt_info: dict[str, Any] = {}
        if run.excerpt_model:
            settings, excerpt_embedder, excerpt_info = fill_excerpt_column(settings, run)
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            outcomes, info = evaluate_with(
                settings, run, questions, stack.hidden if stack else None, excerpt_embedder
            )
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        if stack is not None:
            stack.stop()
    meta = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "forum": str(run.forum),
        "questions": [str(q) for q in run.questions],
        "answerable": len({o.question_id for o in outcomes if o.answerable}),
        "out_of_domain": len({o.question_id for o in outcomes if "out_of_domain" in o.tags}),
        "questions_given": len(questions),
        "interrupted": len({o.question_id for o in outcomes}) < len(questions),
        "embedder": settings.embeddings.model,
        "services": "embedded (local PostgreSQL, forum and model server)"
        if configured is None
        else "configured",
        "backfill": backfill,
        "backfill_embedded": embedded,
        "backfill_skipped": skipped,
        "rerank_timeout_s": settings.reranker.timeout_s,
        "load_average": round(os.getloadavg()[0], 2),
        **excerpt_info,
        **info,
        **run.extra_meta,
    }
    results = build_results(outcomes, run.configs, settings, meta)
    if run.write_thresholds:
        record_thresholds(results)
    write_report(results, run.out)
    return results


def record_thresholds(results: dict[str, Any]) -> None:
    """Write the thresholds proposed from the fit half, with their held-out figures, for the run's
    scorer into ``worker/retrieval/zone_thresholds.json`` (what the worker loads for that scorer)."""
    written = 0
    for scorer, key in (
        (results["meta"].get("scorer"), "calibration"),
        (results["meta"].get("stage_scorer"), "stage_calibration"),
    ):
        held = (results.get(key) or {}).get("heldout") or {}
        if scorer and held:
            _record(results, scorer, held)
            written += 1
    if not written:
        raise ValueError("--write-thresholds needs a reranking or second-stage configuration")


def _record(results: dict[str, Any], scorer: str, held: dict[str, Any]) -> None:
    prop = held["proposed"]
    figures = {
        "fitted": results["meta"]["date"],
        "data": ", ".join(Path(q).name for q in results["meta"]["questions"])
        + f" (fit half; forum {results['meta']['forum']}, {results['meta']['posts_indexed']} posts)",
        ("heldout_test_half" if held["judged_on"] == "test" else "fit_half_in_sample"): {
            "ood_recall": prop["ood_recall"],
            "answerable_abstained_rate": prop["answerable_abstained_rate"],
            "slices": held["slices_proposed"],
        },
    }
    write_thresholds(scorer, prop["abstain_below"], prop["weak_below"], figures)
    log.info("zone thresholds for %s written: %.3f / %.3f", scorer, prop["abstain_below"], prop["weak_below"])
