"""Running questions through retrieval configurations and scoring each answer.

One ``Retriever`` serves every configuration (the switches of ``retrieve``); each question runs through
every configuration in turn, so caches (the reranker's text vectors, PostgreSQL's buffers) are shared
fairly and a slow moment of the machine hits all configurations alike. The question is embedded once
for all configurations; each configuration that embeds is charged that time in its latency.

Rankings scored per question:
- topic ranking: the candidates' topics in order, each at its first position (= the sources, which are
  the candidates deduplicated by topic, extended past ``sources_k`` for @10);
- post ranking: the candidates' post ids in order;
- recall stage: the first ``recall_k`` (25) candidates — what the reranker reads (the same set before and
  after rerank; for ``posts`` the cosine top 25, for ``legacy`` the keyword hits);
- evidence: the first 5 sources' posts plus their neighbour context posts (what the LLM reads).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from eval.evaluation.configs import Config
from eval.evaluation.datasets import Question, half_of, slice_of
from eval.evaluation.metrics import first_rank, hit_at, mean, mrr_at, ndcg_at, percentile, recall_hit
from worker.errors import CitebotError
from worker.retrieval.retriever import RetrievalResult, Retriever
from worker.trace import Trace

log = logging.getLogger(__name__)

RECALL_WIDTH = 25
_CONTEXT = re.compile(r"#(\d+):")
METRICS = (
    "topic_hit@1",
    "topic_hit@5",
    "topic_hit@10",
    "topic_mrr@10",
    "topic_ndcg@10",
    "post_hit@1",
    "post_hit@5",
    "post_hit@10",
    "post_mrr@10",
    "post_ndcg@10",
    "recall@25",
    "evidence_hit@5",
    "cited_accepted",
)

GoldPositions = Mapping[int, tuple[int, int]]  # post_id -> (topic_id, post_number)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One question through one configuration."""

    question_id: str
    config: str
    answerable: bool
    tags: tuple[str, ...]
    metrics: dict[str, float]
    topic_rank: int | None
    post_rank: int | None
    top_logit: float | None
    zone: str
    latency_ms: float
    sources: tuple[int, ...]
    fallbacks: tuple[str, ...]
    error: str | None = None
    channels: dict[str, int | None] | None = None  # best rank of a gold post in each channel
    shape: str | None = None  # the conversation's shape (``datasets.Question.shape``)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.question_id,
            "config": self.config,
            "answerable": self.answerable,
            "tags": list(self.tags),
            **{k: round(v, 4) for k, v in self.metrics.items()},
            "topic_rank": self.topic_rank,
            "post_rank": self.post_rank,
            "top_logit": None if self.top_logit is None else round(self.top_logit, 4),
            "zone": self.zone,
            "latency_ms": round(self.latency_ms, 1),
            "sources": list(self.sources),
            "fallbacks": list(self.fallbacks),
            "error": self.error,
            "shape": self.shape,
            **(self.channels or {}),
        }


def evidence_posts(result: RetrievalResult, k: int, topic_posts: Mapping[tuple[int, int], int]) -> set[int]:
    """Post ids the first ``k`` sources put before the LLM: the sources and their neighbour context."""
    out: set[int] = set()
    for src in result.sources[:k]:
        out.add(src.post_id)
        for line in src.context:
            m = _CONTEXT.match(line)
            if m:
                pid = topic_posts.get((src.topic_id, int(m.group(1))))
                if pid is not None:
                    out.add(pid)
    return out


def score(result: RetrievalResult, q: Question, gold: GoldPositions) -> dict[str, float]:
    """Every metric of ``METRICS`` for one answerable question."""
    topics = [c.topic_id for c in result.candidates]
    posts = [c.post_id for c in result.candidates]
    gt, gp = set(q.gold_topic_ids), set(q.gold_post_ids)
    by_position = {pos: pid for pid, pos in gold.items()}
    return {
        "topic_hit@1": hit_at(topics, gt, 1),
        "topic_hit@5": hit_at(topics, gt, 5),
        "topic_hit@10": hit_at(topics, gt, 10),
        "topic_mrr@10": mrr_at(topics, gt, 10),
        "topic_ndcg@10": ndcg_at(topics, gt, 10),
        "post_hit@1": hit_at(posts, gp, 1),
        "post_hit@5": hit_at(posts, gp, 5),
        "post_hit@10": hit_at(posts, gp, 10),
        "post_mrr@10": mrr_at(posts, gp, 10),
        "post_ndcg@10": ndcg_at(posts, gp, 10),
        "recall@25": recall_hit(posts[:RECALL_WIDTH], gp),
        "evidence_hit@5": recall_hit(evidence_posts(result, 5, by_position), gp),
        # an accepted answer among the sources the bot cites (what a member reads as [n])
        "cited_accepted": recall_hit([s.post_id for s in result.sources], gp),
    }


def channel_ranks(result: RetrievalResult, gold_posts: set[int]) -> dict[str, int | None]:
    """The best rank a gold post had in the vector and in the keyword channel (None: not found there)."""
    vector = [c.vector_rank for c in result.candidates if c.post_id in gold_posts and c.vector_rank]
    keyword = [c.keyword_rank for c in result.candidates if c.post_id in gold_posts and c.keyword_rank]
    return {"gold_vector_rank": min(vector, default=None), "gold_keyword_rank": min(keyword, default=None)}


def top_logit(result: RetrievalResult) -> float | None:
    """The score that set the zone: the second stage's best post score (a topic score may order
    another post first), else the rerank logit."""
    if not result.candidates:
        return None
    stage = [c.stage for c in result.candidates if c.stage is not None]
    return max(stage) if stage else result.candidates[0].logit


Collector = Callable[[Question, Config, RetrievalResult], None]


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A question's vector, embedded once for every configuration, and what embedding it took."""

    vector: list[float]
    ms: float


def embed_once(retriever: Retriever, q: Question, configs: Sequence[Config]) -> QueryVector | None:
    """The question embedded once (``None`` when no configuration embeds, or embedding fails: each
    configuration then embeds, and fails or falls back, by itself)."""
    if not any(c.use_posts and c.use_vector for c in configs):
        return None
    t0 = time.perf_counter()
    try:
        vector = retriever.embed_question(q.asked().text, Trace())
    except CitebotError:
        return None
    return None if vector is None else QueryVector(vector, (time.perf_counter() - t0) * 1000)


def run_one(
    retriever: Retriever,
    q: Question,
    config: Config,
    gold: GoldPositions,
    collect: Collector | None = None,
    query: QueryVector | None = None,
) -> Outcome:
    """One question through one configuration; with ``query`` (the question embedded once for all
    configurations) its embedding time is added to the latency of each configuration that embeds."""
    vector = query.vector if query is not None and config.use_posts and config.use_vector else None
    embed_ms = query.ms if vector is not None and query is not None else 0.0
    t0 = time.perf_counter() - embed_ms / 1000
    try:
        asked = q.asked()
        result = retriever.retrieve(
            asked.text,
            exclude_post_ids=(*q.exclude_post_ids, *asked.already_cited),
            route=config.route,
            query_vector=vector,
        )
    except CitebotError as exc:
        latency = (time.perf_counter() - t0) * 1000
        log.warning("question %s, config %s: %s", q.id, config.name, type(exc).__name__)
        zero = dict.fromkeys(METRICS, 0.0) if q.answerable else {}
        return Outcome(
            q.id, config.name, q.answerable, q.tags, zero, None, None, None, "error", latency, (), (),
            error=f"{type(exc).__name__}: {exc}", shape=q.shape,
        )  # fmt: skip
    latency = (time.perf_counter() - t0) * 1000
    if collect is not None:
        collect(q, config, result)
    metrics = score(result, q, gold) if q.answerable else {}
    return Outcome(
        question_id=q.id,
        config=config.name,
        answerable=q.answerable,
        tags=q.tags,
        metrics=metrics,
        topic_rank=first_rank([c.topic_id for c in result.candidates], set(q.gold_topic_ids))
        if q.answerable
        else None,
        post_rank=first_rank([c.post_id for c in result.candidates], set(q.gold_post_ids))
        if q.answerable
        else None,
        top_logit=top_logit(result),
        zone=result.zone,
        latency_ms=latency,
        sources=tuple(s.post_id for s in result.sources),
        fallbacks=tuple(f"{f.get('stage')}: {f.get('reason')}" for f in result.trace.fallbacks),
        channels=channel_ranks(result, set(q.gold_post_ids)) if q.answerable else None,
        shape=q.shape,
    )


def run_questions(
    retriever: Retriever,
    questions: Sequence[Question],
    configs: Sequence[Config],
    gold: GoldPositions,
    *,
    on_progress: Callable[[int, int], None] | None = None,
    hidden: Callable[[Sequence[int]], AbstractContextManager[None]] | None = None,
    collect: Collector | None = None,
) -> list[Outcome]:
    """Every question through every configuration (question-major order); ``hidden(ids)`` hides the
    question's excluded posts from the forum while it runs (the local forum can; Discourse cannot)."""
    out: list[Outcome] = []
    for i, q in enumerate(questions, 1):
        rows = []
        try:
            with hidden(q.exclude_post_ids) if hidden is not None else nullcontext():
                query = embed_once(retriever, q, configs)
                for config in configs:
                    rows.append(run_one(retriever, q, config, gold, collect, query))
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM: keep the questions that ran through every configuration, report them.
            log.warning("interrupted after %d of %d questions; reporting those", i - 1, len(questions))
            break
        out.extend(rows)
        if on_progress is not None:
            on_progress(i, len(questions))
    return out


def summarize(outcomes: Sequence[Outcome], configs: Sequence[Config]) -> dict[str, dict[str, float]]:
    """Per configuration: the mean of each metric over answerable questions, n, latency, fallbacks."""
    table: dict[str, dict[str, float]] = {}
    for config in configs:
        rows = [o for o in outcomes if o.config == config.name]
        answerable = [o for o in rows if o.answerable]
        summary: dict[str, float] = {"n": len(answerable)}
        for m in METRICS:
            summary[m] = round(mean([o.metrics[m] for o in answerable]), 4)
        latencies = [o.latency_ms for o in rows if o.error is None]
        summary["latency_ms_p50"] = round(percentile(latencies, 50), 1)
        summary["latency_ms_p95"] = round(percentile(latencies, 95), 1)
        summary["errors"] = sum(1 for o in rows if o.error is not None)
        summary["fallbacks"] = sum(1 for o in rows if o.fallbacks and config.use_posts)
        table[config.name] = summary
    return table


def abstention(
    outcomes: Sequence[Outcome], configs: Sequence[Config], abstain_below: float, weak_below: float
) -> dict[str, dict[str, float]]:
    """Per reranking configuration: how often out-of-domain questions abstain, and answerable ones do."""
    out: dict[str, dict[str, float]] = {}
    for config in configs:
        if not config.scores_zones:
            continue
        rows = [o for o in outcomes if o.config == config.name and o.error is None]
        ood = [o for o in rows if "out_of_domain" in o.tags]
        ans = [o for o in rows if o.answerable]
        ood_abstained = sum(o.zone == "abstain" for o in ood)
        ans_abstained = sum(o.zone == "abstain" for o in ans)
        abstained = ood_abstained + ans_abstained
        out[config.name] = {
            "abstain_below": abstain_below,
            "weak_below": weak_below,
            "ood_n": len(ood),
            "answerable_n": len(ans),
            "ood_abstain": ood_abstained,
            "ood_weak": sum(o.zone == "weak" for o in ood),
            "ood_normal": sum(o.zone == "normal" for o in ood),
            "answerable_abstain": ans_abstained,
            "answerable_weak": sum(o.zone == "weak" for o in ans),
            "answerable_normal": sum(o.zone == "normal" for o in ans),
            "recall": round(ood_abstained / len(ood), 4) if ood else 0.0,
            "precision": round(ood_abstained / abstained, 4) if abstained else 0.0,
            "answerable_abstained_rate": round(ans_abstained / len(ans), 4) if ans else 0.0,
            "rerank_fallbacks": sum(1 for o in rows if any(f.startswith("rerank") for f in o.fallbacks)),
        }
    return out


SHAPE_PREFIX = "shape:"
SLICE_METRICS = ("topic_hit@1", "topic_hit@5", "post_hit@5", "post_hit@10", "recall@25", "cited_accepted")


def slices(outcomes: Sequence[Outcome], configs: Sequence[Config]) -> dict[str, dict[str, dict[str, float]]]:
    """Per configuration and per ``<slice>/<half>`` (slices ``long``, ``short``, and each conversation
    shape as ``shape:<name>``; halves ``fit``, ``test``, ``all``): the answerable questions' main
    metrics, and every slice's abstention (``ood``, ``near_domain``: abstained share; answerable
    slices: abstained share too)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for config in configs:
        rows = [o for o in outcomes if o.config == config.name and o.error is None]
        groups: dict[str, list[Outcome]] = {}
        for o in rows:
            names = [slice_of(o.tags)] + ([f"{SHAPE_PREFIX}{o.shape}"] if o.shape else [])
            for name in names:
                for half in (half_of(o.question_id), "all"):
                    groups.setdefault(f"{name}/{half}", []).append(o)
        table: dict[str, dict[str, float]] = {}
        for key in sorted(groups):
            group = groups[key]
            row: dict[str, float] = {"n": len(group)}
            if group[0].answerable:
                for m in SLICE_METRICS:
                    values = [o.metrics[m] for o in group if m in o.metrics]
                    if values:
                        row[m] = round(mean(values), 4)
            row["abstained"] = round(sum(o.zone == "abstain" for o in group) / len(group), 4)
            table[key] = row
        out[config.name] = table
    return out
