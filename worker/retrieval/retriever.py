"""Stages 1–3 in one call: the channels → weighted RRF → the ranker → aggregate, with the legacy path.

::

    question ─┬─ embed ─ recall (pgvector, top recall_k / stage_k) ─┐
              ├─ lexical (full-text over post_index) ───────────────┼─ fuse (RRF) ─ ranker ─ aggregate
              └─ keyword (Discourse search; eval only) ─────────────┘

The lexical (and keyword) branches run in worker threads while the calling thread embeds and
recalls, so the latency is the longer branch plus the ranker. What runs is one ``Route``
(``route.py``; the default is the shipped path): the ranker is the second stage when weights are
fitted for the recall model, joined by a cross-encoder when one is configured; without weights the
cross-encoder alone, or the fused order. ``_zone`` decides the zone in one place. Legacy retrieval —
Discourse search alone, each hit topic's answer as the source (``legacy.py``), zone normal, or abstain
when no topic has an answer — is used when the posts pipeline is switched off, when the index is
empty (checked and cached ``index_check_ttl_s``) and when the question cannot be embedded; each is
recorded in the trace.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Literal

from worker.calibration.store import Calibration, Calibrations
from worker.calibration.store import describe as describe_calibration
from worker.domain import Candidate, Source, Zone
from worker.errors import CitebotError, ConfigError, IndexMismatchError, PermanentError, TransientError
from worker.protocols import Embedder, KeywordSearch, Reranker
from worker.retrieval.aggregate import (
    Thresholds,
    assign_zone,
    build_sources,
    dedupe_by_topic,
    neighbours_for,
    replies_for_questions,
    thresholds_for,
)
from worker.retrieval.excerpts import PostgresExcerptIndex
from worker.retrieval.fusion import fuse_rrf
from worker.retrieval.keyword import KeywordResult, TermSelector, keyword_search
from worker.retrieval.legacy import TopicReader, answer_candidates, read_answers
from worker.retrieval.lexical import LexicalResult, PostgresLexicalIndex
from worker.retrieval.recall import PostIndex
from worker.retrieval.rerank import rerank_candidates, rerank_text
from worker.retrieval.route import SHIPPED, Resolved, Route, is_cross_encoder, resolve_ranker
from worker.retrieval.stage import StageModel, feature_rows, is_brief, load_model, model_set_id, rank_rows
from worker.retrieval.threads import EMPTY, PostgresThreadIndex, Thread
from worker.settings import RetrievalSettings
from worker.trace import Trace

log = logging.getLogger(__name__)

Grain = Literal["post", "topic"]


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """What the generator answers from: numbered sources, the zone, the link grain and the trace."""

    sources: tuple[Source, ...]
    zone: Zone
    grain: Grain
    candidates: tuple[Candidate, ...]
    trace: Trace
    legacy_reason: str | None = None
    # The lowest source score that counts as evidence of the zone (the reranker's calibrated scale):
    # ``weak_below`` in the normal zone, ``abstain_below`` in the weak one; None when no calibrated
    # score decided the zone (no rerank, a fallback, legacy). ``build_prompt(floor=...)`` applies it.
    floor: float | None = None
    # The second stage's raw features of its first candidates, in ``candidates`` order (the eval's fit).
    stage_features: tuple[dict[str, float], ...] = ()

    @property
    def legacy(self) -> bool:
        return self.legacy_reason is not None


@dataclass(frozen=True, slots=True)
class _StageVerdict:
    """What the second stage's zone rests on: its model set, top post score and answerable score."""

    model: StageModel
    top: float | None
    answerable: float | None


class _IndexState:
    """The cached answer to "is the post index empty?" (one query per ``ttl_s`` at most)."""

    def __init__(self, index: PostIndex, ttl_s: float, clock: Callable[[], float]) -> None:
        self._index = index
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._empty: bool | None = None
        self._checked_at = 0.0

    def is_empty(self) -> bool:
        with self._lock:
            now = self._clock()
            if self._empty is None or now - self._checked_at >= self._ttl_s:
                self._empty = self._index.is_empty()  # errors propagate and are not cached
                self._checked_at = now
            return self._empty


class Retriever:
    """Runs retrieval for one question at a time (thread-safe; the keyword branch uses a small pool)."""

    def __init__(
        self,
        embedder: Embedder | None,
        index: PostIndex | None,
        keyword: KeywordSearch | None,
        reranker: Reranker | None,
        settings: RetrievalSettings,
        *,
        terms: TermSelector | None = None,
        lexical: PostgresLexicalIndex | None = None,
        threads: PostgresThreadIndex | None = None,
        excerpts: PostgresExcerptIndex | None = None,
        excerpt_embedder: Embedder | None = None,
        rerank_excerpt_chars: int = 300,
        clock: Callable[[], float] = time.monotonic,
        topics: TopicReader | None = None,
        bots: Sequence[str] = (),
        calibrations: Calibrations | None = None,
    ) -> None:
        if (
            embedder is not None
            and index is not None
            and (embedder.model != index.model or embedder.dimension != index.dimension)
        ):
            raise IndexMismatchError(
                f"the embedder serves {embedder.model} ({embedder.dimension}-d) but the index is read as "
                f"{index.model} ({index.dimension}-d, CITEBOT_EMBEDDINGS__MODEL / __DIMENSION)",
                service="retrieval",
            )
        self.embedder = embedder
        self.index = index
        self.keyword = keyword
        self.reranker = reranker
        self.settings = settings
        self.terms = terms or TermSelector(settings.keyword_max_terms)
        self.rerank_excerpt_chars = rerank_excerpt_chars
        self.lexical = lexical
        self.threads = threads
        # The second bi-encoder and its column: both, or neither (the stage then runs without them).
        self.excerpts = excerpts if excerpt_embedder is not None else None
        self.excerpt_embedder = excerpt_embedder if excerpts is not None else None
        self._stage_model: StageModel | None = None
        self._stage_models: dict[bool, StageModel] = {}
        # ``citebot calibrate``'s weights for this forum, preferred to the shipped ones when present
        self.calibrations = calibrations
        self._info_tried = False
        self._index_state = _IndexState(index, settings.index_check_ttl_s, clock) if index else None
        # The legacy path reads each hit topic as the reader to cite its answer (``legacy.py``).
        self.topics = topics
        self.bots = tuple(bots)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="retrieval-keyword")

    def thresholds(self, scorer: str | None = None) -> Thresholds:
        """The zone thresholds of ``scorer``, by default the reranker in use (its id is known once it
        answered ``/info``)."""
        if scorer is None:
            scorer = getattr(self.reranker, "reranker_id", None)
        return thresholds_for(
            scorer if isinstance(scorer, str) else None,
            abstain_below=self.settings.abstain_below,
            weak_below=self.settings.weak_below,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Retriever:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def retrieve(
        self,
        question: str,
        *,
        exclude_post_ids: Sequence[int] = (),
        route: Route = SHIPPED,
        trace: Trace | None = None,
        query_vector: Sequence[float] | None = None,
        embed_error: CitebotError | None = None,
    ) -> RetrievalResult:
        """Sources and zone for ``question`` along ``route`` (default: the shipped path, ``route.py``).

        ``exclude_post_ids`` are never returned (the question's own post); ``query_vector`` is the
        question's vector when the caller embedded it already (the gate's intent layer), and
        ``embed_error`` the error of an embedding the caller already tried: the legacy path is taken at
        once instead of waiting on the embedder again."""
        trace = trace or Trace()
        s = self.settings
        lexical_on = route.lexical and self.lexical is not None
        keyword_on = route.keyword and self.keyword is not None and s.keyword_k > 0
        n_around = s.neighbours if route.neighbours is None else route.neighbours
        reason = self._legacy_reason(route.posts, trace)
        if reason is None and embed_error is not None and route.vector:
            reason = _reason(embed_error)
        ranker = self.ranker(route) if reason is None else "fused"
        stage_on = ranker in ("stage", "stage+rerank")
        trace.info["config"] = {
            "posts": route.posts,
            "keyword": keyword_on,
            "lexical": lexical_on,
            "ranker": ranker,
            "excerpt": stage_on and route.excerpt and self.excerpts is not None,
            "neighbours": n_around,
        }
        if reason is not None:
            return self._legacy(question, exclude_post_ids, trace, reason, None)

        future: Future[KeywordResult] | None = None
        if keyword_on:
            future = self._pool.submit(self._keyword, question, exclude_post_ids, trace)
        lexical_future: Future[LexicalResult] | None = None
        if lexical_on:
            lexical_future = self._pool.submit(self._lexical, question, exclude_post_ids, trace)
        excerpt_future: Future[list[float]] | None = None
        if stage_on and route.excerpt and self.excerpt_embedder is not None:
            excerpt_future = self._pool.submit(self._excerpt_vector, question, trace)
        recall_k = max(s.recall_k, s.stage_k) if stage_on else s.recall_k
        try:
            vector, vector_ranking = (
                self._embed_and_recall(question, exclude_post_ids, trace, recall_k, query_vector)
                if route.vector
                else ([], ())
            )
        except IndexMismatchError:
            raise  # another model's vectors: fail loudly, never answer from a mixed space
        except (TransientError, PermanentError) as exc:
            return self._legacy(question, exclude_post_ids, trace, _reason(exc), future)

        keyword_ranking: tuple[Candidate, ...] = ()
        if future is not None:
            try:
                keyword_ranking = future.result().candidates
            except CitebotError as exc:
                trace.fallback("keyword", f"keyword search failed: {exc}")
        lexical = LexicalResult((), ())
        if lexical_future is not None:
            try:
                lexical = lexical_future.result()
            except CitebotError as exc:
                trace.fallback("lexical", f"lexical search failed: {exc}")

        with trace.stage("fuse") as st:
            rankings: list[Sequence[Candidate]] = [vector_ranking]
            weights = [1.0]
            for ranking, weight in (
                (lexical.candidates, s.lexical_weight),
                (keyword_ranking, s.keyword_weight),
            ):
                if ranking:
                    rankings.append(ranking)
                    weights.append(weight)
            fused = fuse_rrf(rankings, k=s.rrf_k, weights=weights)
            st.counts = {
                "vector": len(vector_ranking),
                "lexical": len(lexical.candidates),
                "keyword": len(keyword_ranking),
                "fused": len(fused),
            }
            st.scores([c.fused for c in fused])
        if keyword_ranking:
            fused = self._hydrate(fused, trace)

        ranked: Sequence[Candidate] = fused
        verdict: _StageVerdict | None = None
        features: tuple[dict[str, float], ...] = ()
        if stage_on and fused:
            ranked, verdict, features = self._second_stage(
                question,
                fused,
                vector,
                lexical,
                exclude_post_ids,
                trace,
                excerpt_future,
                cross_encoder=ranker == "stage",
                collect_cross_encoder=route.cross_encoder,
            )
        reranked = False
        if ranker in ("rerank", "stage+rerank") and ranked:
            ranked, reranked = self._rerank(question, ranked, trace)
        zone, floor = self._zone(ranked, verdict, reranked, trace)

        with trace.stage("aggregate") as st:
            kept = dedupe_by_topic(ranked)[: s.sources_k]
            context = neighbours_for(kept, n_around, self.index.neighbours) if self.index else {}
            fetch = self.index.neighbours if self.index else None
            context.update(replies_for_questions(kept, ranked, context, fetch))
            sources = build_sources(kept, s.sources_k, context=context)
            st.counts = {"candidates": len(ranked), "sources": len(sources), "neighbours": n_around}
            st.scores([src.score for src in sources])
            st.info = {"zone": zone}
        return RetrievalResult(
            tuple(sources), zone, "post", tuple(ranked), trace, floor=floor, stage_features=features
        )

    def ranker(self, route: Route = SHIPPED) -> Resolved:
        """The ranker ``route`` runs with this retriever (``route.resolve_ranker``): ``auto`` becomes the
        second stage when weights are fitted for the recall model, with the cross-encoder when one is
        configured; without weights, the reranker alone or the fused order."""
        weights = route.vector and self.has_stage_weights()
        resolved = resolve_ranker(
            route.ranker,
            has_weights=weights,
            reranker=self.reranker is not None,
            cross_encoder=weights and self.has_cross_encoder(),  # asked only where it decides
        )
        # weights fitted with the cross-encoder's logit: it is read inside the stage, which ranks
        after_stage = route.ranker == "auto" and route.vector and resolved in ("stage+rerank", "rerank")
        if after_stage and self._has_cross_encoder_weights():
            return "stage"
        return resolved

    def has_stage_weights(self) -> bool:
        """Whether second-stage weights are fitted for the recall model (``stage_weights.json``)."""
        try:
            self.stage_model()
        except ConfigError:
            return False
        return True

    def cross_encoder_id(self) -> str | None:
        """The configured cross-encoder's id (its ``/info`` model id, else its name): the last part of
        the id of a model set fitted with its logit. None without a reranker, or when it is not a
        cross-encoder."""
        if self.reranker is None or not self.has_cross_encoder():
            return None
        rid = getattr(self.reranker, "reranker_id", None)
        return rid if isinstance(rid, str) and rid else self.reranker.name

    def _has_cross_encoder_weights(self) -> bool:
        """Whether ``citebot calibrate`` fitted weights with the configured cross-encoder's logit."""
        if self.calibrations is None or self._stage_model is not None:
            return False  # only calibrate fits them: without its store there are none
        ce = self.cross_encoder_id()
        if ce is None:
            return False
        for excerpt in {False, self.excerpt_embedder is not None}:
            found = self._calibrated(self._model_set(excerpt, ce))
            if found is not None and found.model is not None and found.model.uses_cross_encoder:
                return True
        return False

    def has_cross_encoder(self) -> bool:
        """Whether the configured reranker is a cross-encoder (its ``/info``, read once; a reranker
        without one counts as a cross-encoder). The local model server's calibrated bi-encoder is not."""
        reranker = self.reranker
        if reranker is None:
            return False
        info = getattr(reranker, "info", None)
        if getattr(reranker, "reranker_id", None) is None and callable(info) and not self._info_tried:
            self._info_tried = True
            try:
                info()
            except CitebotError as exc:
                log.info("reranker /info unavailable (%s): taken for a cross-encoder", type(exc).__name__)
        return is_cross_encoder(getattr(reranker, "reranker_id", None))

    def describe(self) -> str:
        """The shipped path this retriever runs, in words (logged at the worker's start; no network:
        whether the reranker is a cross-encoder is read from its ``/info`` at the first question)."""
        model = self.embedder.model if self.embedder is not None else "no embedder"
        lexical = " + lexical" if self.lexical is not None else ""
        weights, reranker = self.has_stage_weights(), self.reranker is not None
        if weights and reranker:
            what = (
                "the second stage, then the reranker's logit orders and sets the zones when it is a "
                "cross-encoder"
            )
        elif weights:
            what = "the second stage (fitted weights) orders and sets the zones"
        elif reranker:
            what = "the reranker orders the fused candidates and sets the zones"
        else:
            what = "fused order, zone normal (no abstention on weak evidence)"
        if not weights:
            fit = f"; no second-stage weights for {model} until the forum is calibrated (docs/calibrate.md)"
        elif self.calibrations is not None:
            fit = f"; {describe_calibration(self._calibrated(self._model_set(False)))}"
        else:
            fit = ""
        return f"retrieval: cosine ({model}){lexical}: {what}{fit}"

    # -- branches -----------------------------------------------------------------------------------

    def _legacy_reason(self, use_posts: bool, trace: Trace) -> str | None:
        if not use_posts:
            return "posts pipeline off"
        if self.embedder is None or self.index is None or self._index_state is None:
            return "no embedder or index configured"
        with trace.stage("index_check") as st:
            try:
                empty = self._index_state.is_empty()
            except TransientError as exc:
                st.fallback = _reason(exc)
                return f"index unavailable: {_reason(exc)}"
            st.info = {"empty": empty}
        return "index empty" if empty else None

    def embed_question(self, question: str, trace: Trace) -> list[float] | None:
        """The question's vector, as recall embeds it (``None`` without an embedder). The pipeline
        hands it to the gate's embedding layer, then back to ``retrieve(query_vector=...)``."""
        embedder = self.embedder
        if embedder is None:
            return None
        with trace.stage("embed") as st:
            vectors = embedder.embed([question], kind="query")
            st.counts = {"texts": 1, "dimension": len(vectors[0]) if vectors else 0}
            st.info = {"model": embedder.model}
        if len(vectors) != 1:
            raise PermanentError(f"embedder returned {len(vectors)} vectors for 1 text", service="embeddings")
        return list(vectors[0])

    def _second_stage(
        self,
        question: str,
        fused: Sequence[Candidate],
        vector: Sequence[float],
        lexical: LexicalResult,
        exclude_post_ids: Sequence[int],
        trace: Trace,
        excerpt_future: Future[list[float]] | None = None,
        *,
        cross_encoder: bool = False,
        collect_cross_encoder: bool = False,
    ) -> tuple[list[Candidate], _StageVerdict, tuple[dict[str, float], ...]]:
        """The first ``stage_k`` fused candidates, with the other posts of their first ``stage_topics``
        topics, by the second stage's score; what its zone rests on (``_zone`` decides it).

        ``cross_encoder``: weights fitted with the configured cross-encoder's logit are preferred (the
        cross-encoder is then asked here, for the ``ce_logit`` feature); ``collect_cross_encoder``: it
        is asked whatever the weights (``citebot calibrate`` collecting features)."""
        s = self.settings
        head, tail = list(fused[: s.stage_k]), list(fused[s.stage_k :])
        with trace.stage("stage") as st:
            thread = self._thread(vector, head, exclude_post_ids, trace)
            wanted = list(dict.fromkeys(c.topic_id for c in head))[: s.stage_topics]
            have = {c.post_id for c in head}
            expand = set(wanted)
            added = [c for c in thread.posts if c.topic_id in expand and c.post_id not in have]
            head += added
            added_ids = {c.post_id for c in added}
            tail = [c for c in tail if c.post_id not in added_ids]
            known = {c.post_id: c.cosine for c in thread.posts}
            need_cosine = [c.post_id for c in head if c.cosine is None and known.get(c.post_id) is None]
            cosines = self.index.cosines(vector, need_cosine) if self.index and need_cosine else {}
            cosines.update({k: v for k, v in known.items() if v is not None})
            need_lexical = [c.post_id for c in head if c.lexical is None]
            lex = self.lexical.scores(lexical.terms, need_lexical) if self.lexical and need_lexical else {}
            head = [
                replace(
                    c,
                    cosine=c.cosine if c.cosine is not None else cosines.get(c.post_id),
                    lexical=lex.get(c.post_id, c.lexical if c.lexical is not None else 0.0),
                )
                for c in head
            ]
            brief = is_brief(question)
            excerpt = self._excerpt_cosines(excerpt_future, head, trace)
            model = self.stage_model(excerpt=excerpt is not None, cross_encoder=cross_encoder)
            ce = None
            if (collect_cross_encoder or model.uses_cross_encoder) and self.cross_encoder_id() is not None:
                ce = self._cross_encoder_logits(question, head, trace)
            rows = feature_rows(head, thread, brief=brief, excerpt=excerpt, ce=ce)
            ranked = rank_rows(model, head, rows)
            by_id = {c.post_id: r for c, r in zip(head, rows, strict=True)}
            scores = [c.stage for c in ranked if c.stage is not None]
            verdict = _StageVerdict(
                model=model,
                top=max(scores, default=None),
                answerable=model.answerable(scores, [by_id[c.post_id] for c in ranked]),
            )
            st.counts = {
                "in": len(head),
                "topic_posts": len(added),
                "cosines": len(cosines),
                "lexical": len(lex),
                "excerpt": len(excerpt or {}),
                "ce": len(ce or {}),
            }
            st.scores([c.stage for c in ranked])
            st.info = {
                "model_set": model.model_set,
                "zone": self._stage_zone(verdict),
                "brief": brief,
                "answerable": verdict.answerable,
            }
        return ranked + tail, verdict, tuple(by_id[c.post_id] for c in ranked)

    def _rerank(
        self, question: str, ranked: Sequence[Candidate], trace: Trace
    ) -> tuple[list[Candidate], bool]:
        """The cross-encoder over the first ``recall_k`` of ``ranked`` (the fused order, or the second
        stage's); whether its logits were applied (a failure keeps the order, recorded)."""
        if self.reranker is None:
            trace.fallback("rerank", "no reranker configured")
            return list(ranked), False
        width = self.settings.recall_k
        with trace.stage("rerank") as st:
            outcome = rerank_candidates(
                self.reranker, question, ranked, width=width, excerpt_chars=self.rerank_excerpt_chars
            )
            st.counts = {"in": min(len(ranked), width)}
            st.scores([c.logit for c in outcome.candidates])
            if outcome.fallback:
                st.fallback = outcome.fallback
        if outcome.fallback:
            trace.fallback("rerank", outcome.fallback)
        return list(outcome.candidates), outcome.applied

    def _cross_encoder_logits(
        self, question: str, head: Sequence[Candidate], trace: Trace
    ) -> dict[int, float] | None:
        """The cross-encoder's logits of ``head`` for the stage's ``ce_logit`` (what ``_rerank`` sends:
        title and post start); None when it fails (the feature then has no value, the fallback in the
        trace)."""
        reranker = self.reranker
        if reranker is None or not head:
            return None
        texts = [rerank_text(c.topic_title, c.body, self.rerank_excerpt_chars) for c in head]
        with trace.stage("stage_ce") as st:
            try:
                logits = reranker.rerank(question, texts)
            except (CitebotError, TimeoutError) as exc:
                st.fallback = _reason(exc)
                trace.fallback("stage_ce", f"cross-encoder unused in the stage: {_reason(exc)}")
                return None
            st.counts = {"in": len(texts)}
        if len(logits) != len(head) or not all(math.isfinite(x) for x in logits):
            trace.fallback("stage_ce", "cross-encoder returned unusable scores")
            return None
        return {c.post_id: float(x) for c, x in zip(head, logits, strict=True)}

    def _stage_zone(self, verdict: _StageVerdict) -> Zone:
        """The second stage's zone: abstain when the question-level score says unanswerable, else its
        top post score against the model set's thresholds (``stage:<model set>``)."""
        limits = self._stage_thresholds(verdict.model)
        if verdict.answerable is None:
            return assign_zone(verdict.top, limits.abstain_below, limits.weak_below)
        if verdict.answerable < verdict.model.abstain_below:
            return "abstain"
        return assign_zone(verdict.top, -math.inf, limits.weak_below)

    def _zone(
        self, ranked: Sequence[Candidate], verdict: _StageVerdict | None, reranked: bool, trace: Trace
    ) -> tuple[Zone, float | None]:
        """The one place the post path's zone is decided, and the source floor that goes with it:

        - the cross-encoder's logits applied: the top logit against the cross-encoder's thresholds
          (``zone_thresholds.json`` by its id, else the seed's -4 / 0), floor at the zone's bound;
        - else the second stage ran: its zone (``_stage_zone``), no floor (a source's score is not the
          stage's);
        - else (fused order, or the reranker failed or is missing): normal, no floor."""
        if reranked and ranked:
            limits = self.thresholds()
            zone = assign_zone(ranked[0].logit, limits.abstain_below, limits.weak_below)
            return zone, {"normal": limits.weak_below, "weak": limits.abstain_below}.get(zone)
        if verdict is not None:
            return self._stage_zone(verdict), None
        return "normal", None

    def _thread(
        self, vector: Sequence[float], head: Sequence[Candidate], exclude: Sequence[int], trace: Trace
    ) -> Thread:
        """The candidates' topics, read whole (without a thread index, or when it fails: no facts)."""
        if self.threads is None or not head:
            return EMPTY
        try:
            return self.threads.posts_of(vector, list(dict.fromkeys(c.topic_id for c in head)), exclude)
        except CitebotError as exc:
            trace.fallback("threads", f"topics not read: {_reason(exc)}")
            return EMPTY

    def _excerpt_vector(self, question: str, trace: Trace) -> list[float]:
        """The question embedded by the second bi-encoder (in the pool, beside recall)."""
        embedder = self.excerpt_embedder
        if embedder is None:
            raise ConfigError("no second bi-encoder configured", service="retrieval")
        with trace.stage("excerpt_embed") as st:
            vectors = embedder.embed([question], kind="query")
            st.info = {"model": embedder.model}
        if len(vectors) != 1:
            raise PermanentError(f"embedder returned {len(vectors)} vectors for 1 text", service="embeddings")
        return list(vectors[0])

    def _excerpt_cosines(
        self, pending: Future[list[float]] | None, head: Sequence[Candidate], trace: Trace
    ) -> dict[int, float] | None:
        """The second model's cosines of ``head`` from the excerpt column; None when it is not in use
        or fails (the stage then runs on the model set without it, the fallback in the trace)."""
        if pending is None or self.excerpts is None:
            return None
        try:
            if not self.stage_model(excerpt=True).uses_excerpt:
                return None  # an explicit model without the feature (tests)
            return self.excerpts.cosines(pending.result(), [c.post_id for c in head])
        except (CitebotError, TimeoutError, OSError, RuntimeError, ValueError) as exc:
            # whatever the second model or its column does, the answer goes out without them
            trace.fallback("excerpt", f"second bi-encoder unused: {_reason(exc)}")
            return None

    def use_stage_model(self, model: StageModel, *, excerpt: bool | None = None) -> None:
        """Use these second-stage weights instead of the fitted ones (the fitting run, tests): for both
        model sets, or only for the one with (``excerpt=True``) or without the second bi-encoder."""
        if excerpt is None:
            self._stage_model = model
        else:
            self._stage_models[excerpt] = model

    def stage_model(self, *, excerpt: bool = False, cross_encoder: bool = False) -> StageModel:
        """The second stage's weights for the recall model in use and, with ``excerpt``, the second
        bi-encoder: those set by ``use_stage_model``, else the forum's own (``citebot calibrate``,
        ``worker.calibration.store``: read again at most every TTL; with ``cross_encoder``, those fitted
        with the configured cross-encoder's logit first), else the shipped ones (ConfigError when there
        are none)."""
        if self._stage_model is not None:
            return self._stage_model
        if excerpt in self._stage_models:
            return self._stage_models[excerpt]
        ce = self.cross_encoder_id() if cross_encoder else None
        if ce is not None:
            with_ce = self._calibrated(self._model_set(excerpt, ce))
            if with_ce is not None and with_ce.model is not None:
                return with_ce.model
        name = self._model_set(excerpt)
        calibrated = self._calibrated(name)
        if calibrated is not None and calibrated.model is not None:
            return calibrated.model
        return load_model(name)

    def _model_set(self, excerpt: bool, cross_encoder: str | None = None) -> str:
        model = self.embedder.model if self.embedder is not None else ""
        second = self.excerpt_embedder.model if excerpt and self.excerpt_embedder is not None else None
        return model_set_id(model, second, cross_encoder)

    def _calibrated(self, model_set: str) -> Calibration | None:
        """The active calibration of ``model_set`` (None without the store, or none recorded)."""
        if self.calibrations is None:
            return None
        found = self.calibrations.get(model_set)
        return found if found is not None and found.model is not None else None

    def _stage_thresholds(self, model: StageModel) -> Thresholds:
        """The zone thresholds of ``model``: the calibration's when ``model`` is the calibrated one
        (explicit settings still win), else the shipped table's for its model set."""
        calibrated = self._calibrated(model.model_set)
        if calibrated is not None and calibrated.model is model and calibrated.thresholds is not None:
            return thresholds_for(
                None,
                abstain_below=self.settings.abstain_below,
                weak_below=self.settings.weak_below,
                base=calibrated.thresholds,
            )
        return self.thresholds(model.scorer_id)

    def _lexical(self, question: str, exclude_post_ids: Sequence[int], trace: Trace) -> LexicalResult:
        if self.lexical is None:
            raise ConfigError("no lexical index configured", service="retrieval")
        with trace.stage("lexical") as st:
            try:
                result = self.lexical.search(question, self.settings.lexical_k, exclude_post_ids)
            except CitebotError as exc:
                st.fallback = _reason(exc)
                raise
            st.counts = {"terms": len(result.terms), "hits": len(result.candidates)}
            st.scores([c.lexical for c in result.candidates])
        return result

    def _embed_and_recall(
        self,
        question: str,
        exclude_post_ids: Sequence[int],
        trace: Trace,
        k: int,
        query_vector: Sequence[float] | None = None,
    ) -> tuple[Sequence[float], tuple[Candidate, ...]]:
        embedder, index = self.embedder, self.index
        if embedder is None or index is None:
            raise ConfigError("posts retrieval needs an embedder and an index", service="retrieval")
        vector = query_vector if query_vector is not None else self.embed_question(question, trace)
        if vector is None:
            raise ConfigError("posts retrieval needs an embedder", service="retrieval")
        with trace.stage("recall") as st:
            found = index.recall(vector, k, exclude_post_ids)
            st.counts = {"k": k, "rows": len(found)}
            st.scores([c.cosine for c in found])
        return vector, tuple(found)

    def _keyword(self, question: str, exclude_post_ids: Sequence[int], trace: Trace) -> KeywordResult:
        search = self.keyword
        if search is None:
            raise ConfigError("no keyword search configured", service="retrieval")
        with trace.stage("keyword") as st:
            try:
                result = keyword_search(
                    search,
                    self.terms,
                    question,
                    limit=self.settings.keyword_k,
                    exclude_post_ids=exclude_post_ids,
                )
            except CitebotError as exc:
                st.fallback = _reason(exc)
                raise
            st.counts = {"queries": len(result.queries), "hits": len(result.candidates)}
            # The words sent are derived from the question: DEBUG-level detail, kept out of the counts.
            st.info = {"queries": list(result.queries)}
        return result

    def _hydrate(self, fused: list[Candidate], trace: Trace) -> list[Candidate]:
        """Give keyword-only hits their indexed text; drop those the index does not hold as evidence.

        The index decides what is evidence (``backfill.evidence``): Discourse's search also finds the
        bot's replies, members' questions to the bot and open questions, which must not be cited. A hit
        the index lacks is dropped (a post created seconds ago is indexed by its webhook event).
        """
        index = self.index
        if index is None:
            return fused
        only_keyword = [c.post_id for c in fused if c.vector_rank is None]
        if not only_keyword:
            return fused
        with trace.stage("hydrate") as st:
            indexed = index.posts(only_keyword)
            out = []
            for cand in fused:
                if cand.vector_rank is None:
                    full = indexed.get(cand.post_id)
                    if full is not None:
                        out.append(replace(cand, text=full.text, category_id=full.category_id))
                else:
                    out.append(cand)
            dropped = len(only_keyword) - len(indexed)
            st.counts = {"keyword_only": len(only_keyword), "indexed": len(indexed), "dropped": dropped}
        return out

    def _citable_hits(self, hits: tuple[Candidate, ...], reason: str, trace: Trace) -> tuple[Candidate, ...]:
        """The legacy hits whose topic the index also holds as public, where the index can tell.

        The search ran as the reader (anonymous by default), so its hits are what an anonymous reader
        can find; the index adds what the events know (a category made private, a topic unlisted, a
        post hidden). With the flag off or the embedder down the index has rows and is asked; when it
        is empty or unreachable the hits stand as the search gave them (the last check before posting
        re-reads each source as the reader)."""
        index = self.index
        if not hits or index is None or reason.startswith(("index empty", "index unavailable")):
            return hits
        with trace.stage("legacy_citable") as st:
            try:
                citable = index.citable_topics(list(dict.fromkeys(h.topic_id for h in hits)))
            except TransientError as exc:
                st.fallback = _reason(exc)
                return hits
            kept = tuple(h for h in hits if h.topic_id in citable)
            st.counts = {"hits": len(hits), "kept": len(kept)}
        return kept

    def _legacy(
        self,
        question: str,
        exclude_post_ids: Sequence[int],
        trace: Trace,
        reason: str,
        pending: Future[KeywordResult] | None,
    ) -> RetrievalResult:
        """Discourse search alone, each hit topic's answer as the source (``legacy.py``), zone normal;
        zone abstain when no hit topic has an answer to cite."""
        trace.fallback("retrieval", f"legacy: {reason}")
        log.info("legacy retrieval: %s", reason)
        hits: tuple[Candidate, ...] = ()
        if pending is not None:
            hits = pending.result().candidates  # the branch already ran; its errors propagate
        elif self.keyword is not None:
            hits = self._keyword(question, exclude_post_ids, trace).candidates
        hits = self._citable_hits(hits, reason, trace)
        answers, context = self._answers(hits, exclude_post_ids, trace)
        zone: Zone = "normal" if answers else "abstain"
        with trace.stage("aggregate") as st:
            sources = build_sources(answers, self.settings.sources_k, context=context)
            st.counts = {"candidates": len(hits), "answers": len(answers), "sources": len(sources)}
            st.info = {"grain": "topic", "zone": zone}
        return RetrievalResult(tuple(sources), zone, "topic", tuple(answers), trace, legacy_reason=reason)

    def _answers(
        self, hits: Sequence[Candidate], exclude_post_ids: Sequence[int], trace: Trace
    ) -> tuple[list[Candidate], dict[int, list[Candidate]]]:
        """The answer of each hit topic, read as the reader; without a topic reader, the hits that are
        replies already (a question, post #1, is never evidence)."""
        want = self.settings.sources_k
        excluded = set(exclude_post_ids)
        reader = self.topics
        if reader is None or not hits:
            return [h for h in hits if h.post_number > 1 and h.post_id not in excluded][:want], {}
        bots = self.bots
        with trace.stage("legacy_answers") as st:
            answers, context, readings = answer_candidates(
                hits, lambda topic_id: read_answers(reader, topic_id, bots), want=want, pool=self._pool
            )
            answers = [a for a in answers if a.post_id not in excluded]
            failed = [r for r in readings if r.error is not None]
            st.counts = {"topics": len(readings), "answered": len(answers), "unreadable": len(failed)}
            if failed:
                st.fallback = "; ".join(f"topic {r.topic_id}: {r.error}" for r in failed)[:500]
        if not answers and failed and all(r.transient for r in failed):
            # nothing could be read, for a reason that passes: retried, not answered "I don't know"
            why = f"legacy: no hit topic could be read ({failed[0].error})"
            raise TransientError(why, service="retrieval")
        return answers, context


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
