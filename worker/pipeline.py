"""The answer path of one question (docs/architecture.md): the orchestration, stage by stage.

Each stage lives in its own module; this file only runs them in order and moves the ``answers`` row
through its states so that a retry resumes where the last attempt stopped::

    queued ──gate hit──────────────────────────────▶ generated(canned) ──post──▶ refused
    queued ──retrieve──▶ retrieved ──generate+sanitize──▶ generated ──post──▶ posted | abstained
    any ──permanent error / LLM down after retries──▶ failed (apology posted or not: llm.on_failure)
    queued ──flags never read (settings unreadable)──▶ held ──flags read──▶ queued  (retried meanwhile)
    queued ──post gone──▶ skipped
    queued ──policy says no: citebot_enabled off, summon policy, rate limit──▶ denied
                          (with a refusal notice: ──▶ generated ──post──▶ denied)

Every question that ends without an answer carries a ``reason`` (``worker.answers.REASONS``).

| stage | module |
|---|---|
| load post + flags | ``worker.clients.discourse``, ``worker.flags`` |
| who may ask, and where | ``worker.summon``, ``worker.members`` |
| question text | ``worker.question`` |
| 0 gate | ``gate`` |
| 1–3 recall, keyword, RRF, rerank, zones | ``worker.retrieval.retriever`` |
| 4–5 prompt, generate, sanitize | ``worker.generation.reply`` |
| last check of the sources before posting | ``worker.recheck`` |
| 6 post | ``worker.clients.discourse`` + ``worker.answers`` |

Exactly once: the row is the unit; a job holds a PostgreSQL advisory lock on the post id for its whole
run, so two deliveries of one question never work at once; the reply text is stored (state
``generated``) before it is posted, and a job that finds a ``generated`` row first looks in the topic
for a reply the bot already made to that post, so a worker killed between posting and recording does
not post twice. A redelivered message for a finished row does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from gate import Gate, GateDecision, IntentLayer, canned_text, detect_language
from sanitizer import LinkGrain
from worker import answers
from worker.domain import Delivery, ForumPost, ForumTopic, PendingPost, Source, Zone
from worker.errors import CitebotError, HeldError, NotFoundError, PermanentError, TransientError
from worker.flags import FlagReader, Flags, FlagState, SummonRules
from worker.generation.reply import Written, write_reply
from worker.generation.wording import Place, place_of
from worker.html_text import html_to_text
from worker.limits import LimitDecision, RateLimiter
from worker.members import MemberDirectory
from worker.metrics import FALLBACKS, JOBS, STAGE_SECONDS, ZONES
from worker.protocols import ChatModel, Forum
from worker.question import Question, pointed_posts, read_question
from worker.quotes import plain, post_quotes, quoted_lines
from worker.recheck import Recheck, SourceCheck
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.settings import Settings
from worker.summon import RULE_PREFIX, NoticeKind, SummonDecision, SummonPolicy, notice_text
from worker.trace import Trace

log = logging.getLogger(__name__)

# Key space of the per-question advisory locks (two-int form: class, post id).
ANSWER_LOCK_CLASS = 0x43425431
APOLOGY = {
    "en": "Sorry, I could not write an answer right now. Please try again later, "
    "or wait for a member to reply.",
    "fr": "Désolé, je n'ai pas pu rédiger de réponse pour le moment. Réessayez plus tard, "
    "ou attendez la réponse d'un membre.",
}
DISABLED = "citebot_enabled is off"
OPEN_STATES: tuple[answers.AnswerState, ...] = tuple(
    s for s in answers.STATES if s not in answers.FINAL_STATES
)


@dataclass(frozen=True, slots=True)
class Screen:
    """Stage 0's verdict: the canned reply to post instead of an answer (a refusal, or the support
    reply: ``GateDecision.kind``), if any, the vector the intent layer embedded (recall reuses it), and
    the error that kept the question from being embedded (recall then goes legacy at once)."""

    refusal: GateDecision | None
    vector: list[float] | None
    embed_error: CitebotError | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one call of ``answer`` did (for tests, logs and the reliability suite)."""

    post_id: int
    state: str
    detail: str = ""
    reply_post_id: int | None = None


class AnswerPipeline:
    """Claims a question's row and takes it to its final state. Implements ``worker.runtime.Answerer``."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: ConnectionPool,
        forum: Forum,
        flags: FlagReader,
        gate: Gate,
        retriever: Retriever,
        chat: ChatModel,
        limiter: RateLimiter | None = None,
        intent: IntentLayer | None = None,
        summon: SummonPolicy | None = None,
        recheck: SourceCheck | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.forum = forum
        self.flags = flags
        self.gate = gate
        self.retriever = retriever
        self.chat = chat
        self.limiter = limiter
        self.intent = intent
        self.summon = summon or SummonPolicy(
            MemberDirectory(forum, settings.summon),
            bot_username=settings.discourse.bot_username,
            answer_pms=settings.discourse.answer_pms,
        )
        self.recheck = recheck

    # -- entry point -------------------------------------------------------------------------------

    def answer(self, delivery: Delivery, *, last_attempt: bool = False) -> None:
        """Claim the question's row (the first delivery creates it, ``queued``), then :meth:`run` it."""
        with self.pool.connection() as conn:
            created = answers.claim_delivery(conn, delivery)
        log.debug("question claimed=%s", created, extra={"post_id": delivery.post_id})
        self.run(delivery.post_id, last_attempt=last_attempt)

    def run(self, post_id: int, *, last_attempt: bool = False) -> Outcome:
        """Advance the question of ``post_id`` as far as it goes; raises TransientError to be retried.

        On the ``last_attempt`` (the queue says no retry follows) a transient failure gives up instead:
        the apology of ``llm.on_failure``, never a half answer."""
        with self._locked(post_id) as conn:
            if conn is None:
                JOBS.labels("busy").inc()
                return Outcome(post_id, "busy", "another worker holds this question")
            row = answers.get(conn, post_id)
            if row is None:
                raise PermanentError(f"no answers row for post {post_id}", service="citebot")
            if row.state in answers.FINAL_STATES:
                JOBS.labels("already_done").inc()
                return Outcome(post_id, row.state, "already final", row.reply_post_id)
            attempts = row.attempts + 1
            answers.transition(conn, post_id, [row.state], row.state, attempts=attempts)
            try:
                outcome = self._advance(conn, row, attempts)
            except HeldError as exc:
                if not last_attempt:
                    JOBS.labels("held").inc()
                    raise
                # Never given up: the row stays ``held`` and the poller sends it again (answers.claim_stale).
                outcome = Outcome(post_id, "held", str(exc))
            except TransientError as exc:
                if last_attempt:
                    outcome = self._give_up(conn, post_id, row.topic_id, f"transient: {exc}")
                else:
                    JOBS.labels("retry").inc()
                    answers.record_error(conn, post_id, str(exc))
                    raise
            except PermanentError as exc:
                outcome = self._fail(conn, post_id, f"permanent: {exc}")
            JOBS.labels(outcome.state).inc()
            return outcome

    # -- the stages ---------------------------------------------------------------------------------

    def _advance(self, conn: psycopg.Connection[Any], row: answers.Answer, attempts: int) -> Outcome:
        post_id = row.post_id
        if row.state == "generated":
            return self._post(conn, row.post_id, resumed=True)
        trace = Trace()
        state = self.flags.state()
        trace.info["flags"] = state.trace()
        trace.info["attempt"] = attempts
        flags = state.flags
        if not state.known:
            self._hold(conn, row, state)
        if row.state == "held":
            answers.transition(conn, post_id, ["held"], "queued", reason=None, error=None)
            row = replace(row, state="queued")
        notices = state.summon.refusal_notice == "short"
        if not flags.enabled and not notices:
            # Off, and no notice to post: decided without reading the post.
            return self._decline(conn, post_id, "disabled", DISABLED, trace)

        with self._stage(trace, "load"):
            post = self._load_post(post_id)
            topic = None
            if post is not None and not (post.deleted or post.hidden):
                topic = self._load_topic(post.topic_id)
        if post is None or topic is None:
            answers.transition(
                conn,
                post_id,
                ["queued", "retrieved"],
                "skipped",
                reason="post_gone",
                error="post gone or hidden",
            )
            return Outcome(post_id, "skipped", "post gone or hidden")
        if row.user_id is None:
            answers.record_author(conn, post_id, post.user_id, post.username, post.post_number)

        # who may ask, and where: decided before anything reads the question's text (worker/summon.py)
        with self._stage(trace, "summon") as st:
            decision = self.summon.check(post, topic, state.summon)
            st.info.update(decision.trace())
        if not flags.enabled:
            # A member who may ask, in a place the bot may post, is told the bot is off (when the admin
            # chose notices); anyone else is refused in silence, as the summon policy would.
            tell = notices and decision.allowed and self._notice_within_limits(post)
            notice = self._notice(post, "disabled") if tell else None
            return self._decline(conn, post_id, "disabled", DISABLED, trace, notice=notice)
        if not decision.allowed:
            return self._deny(conn, post, decision, state.summon, trace)

        if self.limiter is not None and row.state == "queued":
            limit = self.limiter.check(post_id=post_id, user_id=post.user_id, topic_id=post.topic_id)
            if not limit.allowed:
                return self._over_limit(conn, post, limit, state.summon, trace)

        with self._stage(trace, "question"):
            asked = self._question(conn, post, topic)
        trace.info["question"] = asked.trace()
        question = asked.text
        log.debug("question of post %d: %s", post_id, question, extra={"post_id": post_id})
        # The member's own words say what is asked, in which language, and whether it is refused; the
        # conversation around them only helps find the answer.
        words = asked.own or question
        language = detect_language(words)
        trace.info["language"] = language
        place = place_of(post)
        trace.info["place"] = place

        # stage 0: the gate, its rules and its embedding layer; either refuses the same way
        screen = self._screen(words, flags, trace)
        refusal, vector = screen.refusal, screen.vector
        if refusal is not None:
            answers.transition(
                conn,
                post_id,
                ["queued", "retrieved"],
                "generated",
                reply_raw=canned_text(refusal),
                rule_id=refusal.rule_id,
                # A support reply (someone in crisis asking where to find help) is not a refusal.
                trace=self._trace_dict(
                    trace,
                    kind="support" if refusal.kind == "support" else "canned",
                    category=refusal.category,
                ),
            )
            return self._post(conn, post_id, resumed=False)

        # stages 1–3: retrieval
        with self._stage(trace, "retrieve_total"):
            # what the member quoted is not evidence of the answer: they have read it (worker/quotes.py)
            quoted = _quoted_post_ids(conn, post, topic)
            result = self.retriever.retrieve(
                question,
                exclude_post_ids=(post_id, *asked.already_cited, *quoted),
                route=Route(posts=flags.posts_pipeline, ranker="auto" if flags.rerank else "fused"),
                trace=trace,
                query_vector=vector if words == question else None,
                embed_error=screen.embed_error,
            )
        result = replace(result, sources=_unquoted(result.sources, quoted_lines(post.raw or "")))
        for fb in result.trace.fallbacks:
            FALLBACKS.labels(fb["stage"], fb["reason"].split(":")[0][:40]).inc()
        answers.transition(
            conn,
            post_id,
            ["queued", "retrieved"],
            "retrieved",
            zone=result.zone,
            sources=[_source_json(s) for s in result.sources],
            trace=self._trace_dict(trace),
        )

        # stages 4–5: generation and sanitizing, then the last check of the sources (worker.recheck):
        # a source no longer visible to every reader is dropped and the reply written again without it.
        # Legacy sources are answer posts too (worker/retrieval/legacy.py): cited at post grain.
        post_sources = result.grain == "post" or result.legacy
        grain: LinkGrain = "post" if (flags.post_links and post_sources) else "topic"
        source_grain: LinkGrain = "post" if result.grain == "post" else "topic"
        said = (place, language)
        written = self._write(question, result.sources, result.zone, result.floor, grain, trace, said)
        with self._stage(trace, "recheck") as st:
            check = self._recheck(written.prompt.sources_used, source_grain)
            st.counts = {"sources": len(written.prompt.sources_used), "dropped": len(check.dropped)}
        if check.changed:
            dropped_ids = [post for post, _why in check.dropped]
            log.info(
                "%d source(s) no longer visible; reply rebuilt without them",
                len(dropped_ids),
                extra={"post_id": post_id},
            )
            trace.fallback("recheck", "dropped " + "; ".join(f"{p}: {why}" for p, why in check.dropped))
            FALLBACKS.labels("recheck", "source_not_visible").inc()
            zone: Zone = written.prompt.zone if check.kept else "abstain"
            written = self._write(question, check.kept, zone, result.floor, grain, trace, said)
        prompt, clean, reply = written.prompt, written.clean, written.reply
        # What is recorded is what is posted: a reply that cites nothing is an "I don't know", zone
        # abstain (state ``abstained``), whatever zone the evidence had.
        zone = prompt.zone if clean.cited else "abstain"
        used = prompt.sources_used if clean.cited else ()
        if zone != prompt.zone:
            trace.info["zone_evidence"] = prompt.zone
        ZONES.labels(zone).inc()
        answers.transition(
            conn,
            post_id,
            ["retrieved"],
            "generated",
            zone=zone,
            sources=[_source_json(s) for s in used],
            reply_raw=reply,
            trace=self._trace_dict(trace, kind="answer", grain=grain, source_grain=source_grain),
        )
        # stage 6: post
        return self._post(conn, post_id, resumed=False)

    def _write(
        self,
        question: str,
        sources: Sequence[Source],
        zone: Zone,
        floor: float | None,
        grain: LinkGrain,
        trace: Trace,
        said: tuple[Place, str] = ("new_topic", "en"),
    ) -> Written:
        """Stages 4 and 5 (``worker.generation.reply``) over ``sources``; raises PermanentError when
        the sanitizer cannot make the reply safe (nothing is posted). ``said`` is where the member
        asked and the question's language."""
        place, language = said
        written = write_reply(
            question,
            sources,
            zone,
            chat=self.chat,
            bot_name=self.settings.discourse.bot_username,
            base_url=self.settings.discourse.base_url,
            grain=grain,
            token_budget=self.settings.llm.context_tokens,
            floor=floor,
            place=place,
            language=language,
            stage=lambda name: self._stage(trace, name),
        )
        if not written.ok:
            raise PermanentError(
                "the sanitizer could not make the reply safe; nothing posted", service="sanitizer"
            )
        return written

    def _recheck(self, sources: Sequence[Source], grain: LinkGrain) -> Recheck:
        """The last check of ``sources`` (``worker.recheck``); without a checker every source stands."""
        if self.recheck is None:
            return Recheck(tuple(sources), ())
        return self.recheck.recheck(sources, grain)

    def _screen(self, question: str, flags: Flags, trace: Trace) -> Screen:
        """Stage 0's one refusal, if the rules or the embedding layer (docs/gate.md) hit, and the vector the
        layer embedded (recall reuses it). An intent hit is a ``GateDecision`` like a rule's: rule
        ``intent.<category>``, that category's canned reply in the question's language.

        A hit of a rule with a benign reading is the layer's to confirm when the layer has a rule veto
        (``gate.intent``): the question is embedded, and a score under the veto drops the rule (the
        strict rules and the lexical head still judge it). Without a vector there is no second
        opinion and the rule's refusal stands."""
        intent = self.intent if flags.intent_layer and flags.posts_pipeline else None
        decision: GateDecision | None = None
        ruled: GateDecision | None = None
        if flags.input_gate:
            with self._stage(trace, "gate") as st:
                decision = self.gate.check(question)
                st.info["hit"] = decision.hit
                st.info["rule"] = decision.rule_id
                st.info["category"] = decision.category
            if decision.kind == "support":
                return Screen(decision, None)  # the support reply is posted instead of an answer
            if decision.hit:
                if not (intent is not None and intent.rule_veto is not None and decision.benign_reading):
                    return Screen(decision, None)
                ruled = decision
        if intent is None:
            return Screen(None, None)
        try:
            vector = self.retriever.embed_question(question, trace)
        except CitebotError as exc:
            if ruled is None:
                # The layer cannot run: the rules have decided (no hit) and recall, which needs the same
                # embedding, goes straight to the legacy path (docs/gate.md, docs/retrieval.md).
                log.warning(
                    "intent layer skipped, the question could not be embedded: %s", type(exc).__name__
                )
                trace.fallback("intent", f"layer skipped: {type(exc).__name__}")
                FALLBACKS.labels("intent", "embedding_failed").inc()
                return Screen(None, None, exc)
            log.warning("rule veto skipped, the question could not be embedded: %s", type(exc).__name__)
            trace.info["rule_veto_skipped"] = type(exc).__name__
            return Screen(ruled, None, exc)
        if vector is None:
            return Screen(ruled, None)
        with self._stage(trace, "intent") as st:
            # The layer's lexical floor reads the lexical head's score of the same question (the
            # gate's decision carries it only when no rule hit).
            if decision is not None and not decision.hit:
                lexical = decision.lexical_score
            else:
                lexical = self.gate.lexical_score(question)
            verdict = intent.check(vector, lexical_score=lexical)
            st.info.update(hit=verdict.hit, category=verdict.category, score=verdict.score)
            st.info["threshold"] = verdict.threshold
            st.info["lexical_score"] = None if lexical is None else round(lexical, 4)
            st.info["lexical_floor"] = intent.lexical_floor
            if ruled is not None:
                if not intent.vetoes_rule(verdict, lexical_score=lexical):
                    st.info["rule_upheld"] = ruled.rule_id
                    return Screen(ruled, vector)
                st.info["rule_vetoed"] = ruled.rule_id
                st.info["rule_veto"] = intent.rule_veto
                strict = self.gate.check(question, benign_reading=False)
                if strict.hit:
                    return Screen(strict, vector)
        if not verdict.hit:
            return Screen(None, vector)
        language = str(trace.info["language"])
        reply = self.gate.rules.replies[verdict.category].text(language)
        hit = GateDecision(True, f"intent.{verdict.category}", verdict.category, language, reply)
        return Screen(hit, vector)

    def _post(self, conn: psycopg.Connection[Any], post_id: int, *, resumed: bool) -> Outcome:
        row = answers.get(conn, post_id)
        if row is None or row.state != "generated" or row.reply_raw is None:
            raise PermanentError(f"post {post_id} has no generated reply to post", service="citebot")
        final = _final_state(row)
        started = time.perf_counter()
        existing = self._existing_reply(row) if resumed else None
        if resumed and existing is None:
            self._recheck_stored(conn, row)
        reply_number: int | None = None
        if existing is not None:
            log.info("reply already on the forum; recording it", extra={"post_id": post_id})
            reply_id = existing
        else:
            post_number = row.post_number
            created = self.forum.create_post(row.topic_id, row.reply_raw, reply_to_post_number=post_number)
            if isinstance(created, PendingPost):
                return self._held(conn, row, created, started)
            reply_id, reply_number = created.id, created.post_number
        STAGE_SECONDS.labels("post").observe(time.perf_counter() - started)
        trace = dict(row.trace or {})
        trace["post"] = {"duration_ms": round((time.perf_counter() - started) * 1000, 3), "resumed": resumed}
        answers.transition(
            conn,
            post_id,
            ["generated"],
            final,
            reply_post_id=reply_id,
            reply_post_number=reply_number,
            posted_at=_now(conn),
            # a notice keeps the refusal's detail, an apology the failure's
            error=row.error if final in ("denied", "failed") else None,
            reason=_failure_reason(row.error or "") if final == "failed" else row.reason,
            trace=trace,
        )
        where = {"post_id": post_id, "topic_id": row.topic_id}
        if final == "failed":
            FALLBACKS.labels("generate", "apology").inc()
            log.warning("question failed, apology posted (failed): %s", row.error, extra=where)
            return Outcome(post_id, final, f"apology posted: {row.error}", reply_id)
        log.info("answered (%s)", final, extra=where)
        return Outcome(post_id, final, "resumed" if resumed else "", reply_id)

    def _recheck_stored(self, conn: psycopg.Connection[Any], row: answers.Answer) -> None:
        """A reply generated by an earlier attempt is checked again before it is posted: if one of its
        sources is no longer visible, the row goes back to ``retrieved`` and the retry writes it anew
        (TransientError); the inline check of ``_advance`` covers the normal path."""
        trace = row.trace if isinstance(row.trace, dict) else {}
        if trace.get("kind") != "answer" or not row.sources:
            return  # a canned refusal or an apology cites nothing
        grain: LinkGrain = "post" if trace.get("source_grain", trace.get("grain")) == "post" else "topic"
        sources = [_source_from_json(s) for s in row.sources if isinstance(s, dict)]
        check = self._recheck(sources, grain)
        if not check.changed:
            return
        why = "a source is no longer visible: " + "; ".join(f"{p}: {w}" for p, w in check.dropped)
        answers.transition(conn, row.post_id, ["generated"], "retrieved", error=why)
        FALLBACKS.labels("recheck", "source_not_visible").inc()
        raise TransientError(why + " (the reply is written again)", service="citebot")

    def _held(
        self, conn: psycopg.Connection[Any], row: answers.Answer, pending: PendingPost, started: float
    ) -> Outcome:
        """Discourse queued the reply for review: final, never retried (another try queues a copy)."""
        STAGE_SECONDS.labels("post").observe(time.perf_counter() - started)
        trace = dict(row.trace or {})
        trace["post"] = {
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "held_for_review": True,
            "pending_post_id": pending.pending_id,
        }
        why = "Discourse holds the reply for review (make the bot account staff or trusted)"
        answers.transition(
            conn,
            row.post_id,
            ["generated"],
            "held_for_review",
            reason="reply_held_for_review",
            error=why,
            trace=trace,
        )
        log.warning(
            "reply held for review by Discourse", extra={"post_id": row.post_id, "topic_id": row.topic_id}
        )
        return Outcome(row.post_id, "held_for_review", why)

    def _hold(self, conn: psycopg.Connection[Any], row: answers.Answer, state: FlagState) -> None:
        """The flags have never been read: hold the question (state ``held``, reason
        ``settings_unreadable``) and raise HeldError so that the queue retries it with backoff."""
        why = f"the citebot site settings could not be read ({state.error or 'no read yet'})"
        fields: dict[str, object] = {"reason": "settings_unreadable", "error": why}
        if not answers.transition(conn, row.post_id, ["queued", "retrieved"], "held", **fields):
            answers.transition(conn, row.post_id, ["held"], "held", **fields)
        log.warning("question held: %s", why, extra={"post_id": row.post_id, "stage": "flags"})
        raise HeldError(why + "; the question is held and retried", service="citebot")

    def _deny(
        self,
        conn: psycopg.Connection[Any],
        post: ForumPost,
        decision: SummonDecision,
        rules: SummonRules,
        trace: Trace,
    ) -> Outcome:
        """The summon policy refused the question: ``denied``, reason and ``rule_id`` ``summon.<reason>``.

        With ``citebot_refusal_notice`` ``short``, a refused member (never a refused place, except the
        bot's own PM while PMs are off) gets one generic line in the post's language, naming no reason (a
        silence is nobody else's business); the notice counts against the member's and the topic's
        hourly limits, so refusals cannot be turned into a flood of notices."""
        kind: NoticeKind = "pm" if decision.reason == "pm_disabled" else "member"
        # In a PM only its first post is told: the rest of the conversation is refused in silence.
        notify = (
            rules.refusal_notice == "short"
            and decision.may_notify
            and (kind != "pm" or post.post_number == 1)
            and self._notice_within_limits(post)
        )
        return self._decline(
            conn,
            post.id,
            decision.rule_id,
            decision.detail,
            trace,
            notice=self._notice(post, kind) if notify else None,
            rule_id=decision.rule_id,
        )

    def _over_limit(
        self,
        conn: psycopg.Connection[Any],
        post: ForumPost,
        limit: LimitDecision,
        rules: SummonRules,
        trace: Trace,
    ) -> Outcome:
        """Over an hourly limit: ``denied``, reason ``limit.<per_user|per_topic>``. The notice, when the
        admin chose one, goes with the first question over the limit only: one line per member (or
        topic) and window, never one per question."""
        reason = f"limit.{limit.reason}"
        detail = (
            f"rate limit {limit.reason} ({limit.user_count} by the member, {limit.topic_count} in the topic"
            " this hour)"
        )
        tell = rules.refusal_notice == "short" and limit.first_over
        return self._decline(
            conn, post.id, reason, detail, trace, notice=self._notice(post, "limit") if tell else None
        )

    def _decline(
        self,
        conn: psycopg.Connection[Any],
        post_id: int,
        reason: str,
        detail: str,
        trace: Trace,
        *,
        notice: str | None = None,
        rule_id: str | None = None,
    ) -> Outcome:
        """A policy said no: final state ``denied`` with its ``reason``. With a ``notice``, the row goes
        through ``generated`` and the notice is posted first (``_post`` ends it in ``denied``), so a
        retry after a crash does not post it twice."""
        log.info("question denied (%s)", reason, extra={"post_id": post_id})
        fields: dict[str, object] = {
            "reason": reason,
            "rule_id": rule_id,
            "error": detail,
            "trace": self._trace_dict(trace, kind="policy"),
        }
        undecided: list[answers.AnswerState] = ["queued", "retrieved"]
        if notice is not None:
            answers.transition(conn, post_id, undecided, "generated", reply_raw=notice, **fields)
            return self._post(conn, post_id, resumed=False)
        answers.transition(conn, post_id, undecided, "denied", **fields)
        return Outcome(post_id, "denied", reason)

    def _notice(self, post: ForumPost, kind: NoticeKind) -> str:
        """The short refusal notice of ``kind`` in the language of the post."""
        return notice_text(kind, detect_language(post.raw or html_to_text(post.cooked)))

    def _notice_within_limits(self, post: ForumPost) -> bool:
        if self.limiter is None:
            return True
        return self.limiter.check(post_id=post.id, user_id=post.user_id, topic_id=post.topic_id).allowed

    # -- failure handling ---------------------------------------------------------------------------

    def _give_up(self, conn: psycopg.Connection[Any], post_id: int, topic_id: int, why: str) -> Outcome:
        """The last attempt failed transiently: apologise once (or stay silent), never half-answer."""
        row = answers.get(conn, post_id)
        if row is not None and row.state == "generated":
            # The reply exists; only posting failed. Leave it for the catch-up path, do not apologise.
            return self._fail(conn, post_id, why)
        if self.settings.llm.on_failure == "apology" and row is not None:
            language = "fr" if _looks_french(row) else "en"
            # kind "apology": ``_post`` records the row ``failed`` with ``why`` (also when a later
            # attempt posts it), and logs it as such, never as an answer
            trace = {**(row.trace if isinstance(row.trace, dict) else {}), "kind": "apology"}
            answers.transition(
                conn,
                post_id,
                ["queued", "retrieved"],
                "generated",
                reply_raw=APOLOGY[language],
                error=why,
                zone=None,
                sources=[],
                trace=trace,
            )
            try:
                return self._post(conn, post_id, resumed=False)
            except CitebotError as exc:
                return self._fail(conn, post_id, f"{why}; apology not posted: {exc}")
        return self._fail(conn, post_id, why)

    def _fail(self, conn: psycopg.Connection[Any], post_id: int, why: str) -> Outcome:
        log.warning("question failed: %s", why, extra={"post_id": post_id})
        answers.transition(conn, post_id, OPEN_STATES, "failed", reason=_failure_reason(why), error=why)
        return Outcome(post_id, "failed", why)

    # -- helpers ------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, post_id: int) -> Iterator[psycopg.Connection[Any] | None]:
        """A connection in autocommit mode holding the question's advisory lock, or None if taken."""
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                got = conn.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (ANSWER_LOCK_CLASS, post_id)
                ).fetchone()
                if not got or not got[0]:
                    yield None
                    return
                try:
                    yield conn
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (ANSWER_LOCK_CLASS, post_id))
            finally:
                conn.autocommit = False

    @contextmanager
    def _stage(self, trace: Trace, name: str) -> Iterator[Any]:
        with trace.stage(name) as st:
            started = time.perf_counter()
            yield st
        STAGE_SECONDS.labels(name).observe(time.perf_counter() - started)

    def _load_post(self, post_id: int) -> ForumPost | None:
        try:
            return self.forum.get_post(post_id)
        except NotFoundError:
            return None

    def _load_topic(self, topic_id: int) -> ForumTopic | None:
        try:
            return self.forum.get_topic(topic_id)
        except NotFoundError:
            return None

    def _question(self, conn: psycopg.Connection[Any], post: ForumPost, topic: ForumTopic) -> Question:
        """The question of ``post`` in its conversation (``worker.question``): a follow-up to the bot's
        earlier answer in the topic carries that answer's question and cited posts."""
        earlier = None
        if post.post_number > 1:
            earlier = answers.earlier(
                conn, post.topic_id, post.post_number, post.user_id, pointed_posts(post)
            )
        return read_question(post, topic, self.forum, self.settings.discourse.bot_username, earlier)

    def _existing_reply(self, row: answers.Answer) -> int | None:
        """The bot's reply to this question already on the forum (a crash after posting), if any."""
        topic = self.forum.get_topic(row.topic_id, all_posts=True)
        bot = self.settings.discourse.api_username.lower()
        for post in topic.posts:
            if post.username.lower() == bot and post.reply_to_post_number == row.post_number:
                return post.id
        return None

    def _trace_dict(self, trace: Trace, **extra: object) -> dict[str, object]:
        out = trace.to_dict()
        out.update(extra)
        return out


def _quoted_post_ids(conn: psycopg.Connection[Any], post: ForumPost, topic: ForumTopic) -> tuple[int, ...]:
    """The posts ``post`` quotes from its own topic (those of the page read), and the sources of the
    bot's replies among them: a member who quotes the bot's answer has read what it cited."""
    numbers = {
        q.post_number
        for q in post_quotes(post.cooked, post.raw)
        if q.of_post and q.topic_id == post.topic_id and q.post_number is not None
    }
    if not numbers:
        return ()
    ids = {p.id for p in topic.posts if p.post_number in numbers}
    ids |= answers.cited_by_reply(conn, post.topic_id, numbers)
    return tuple(sorted(ids - {post.id}))


def _unquoted(sources: Sequence[Source], quoted: Sequence[str]) -> tuple[Source, ...]:
    """``sources`` without what the member quoted: a source whose excerpt holds a quoted line is left
    out, a nearby-post line holding one is dropped (the bot's earlier answer quoted a topic's reply
    that now comes back as the context of its question)."""
    if not quoted:
        return tuple(sources)

    def seen(text: str) -> bool:
        flat = plain(text)
        return any(line in flat for line in quoted)

    return tuple(
        replace(s, context=tuple(c for c in s.context if not seen(c))) for s in sources if not seen(s.excerpt)
    )


def _failure_reason(why: str) -> str:
    return "transient_error" if why.startswith("transient") else "permanent_error"


def _final_state(row: answers.Answer) -> answers.AnswerState:
    """The state a posted reply leaves its row in: what the reply is, not that it was posted."""
    if isinstance(row.trace, dict) and row.trace.get("kind") == "apology":
        return "failed"  # its reason says why (a failure's, not a refusal's)
    if row.reason or (row.rule_id or "").startswith(RULE_PREFIX):
        return "denied"  # a refusal notice (``_decline``)
    if isinstance(row.trace, dict) and row.trace.get("kind") == "support":
        return "posted"  # the support reply answers the question (rule_id "support" says which reply)
    if row.rule_id:
        return "refused"
    return "abstained" if row.zone == "abstain" else "posted"


def _now(conn: psycopg.Connection[Any]) -> Any:
    got = conn.execute("SELECT now()").fetchone()
    return got[0] if got else None


def _source_json(source: Source) -> dict[str, object]:
    return {
        "n": source.n,
        "post_id": source.post_id,
        "topic_id": source.topic_id,
        "post_number": source.post_number,
        "slug": source.slug,
        "title": source.title,
        "score": source.score,
    }


def _source_from_json(data: dict[str, Any]) -> Source:
    """A stored source (``_source_json``) back as a ``Source``; its excerpt is not stored."""
    return Source(
        n=int(data.get("n") or 0),
        post_id=int(data.get("post_id") or 0),
        topic_id=int(data.get("topic_id") or 0),
        post_number=int(data.get("post_number") or 1),
        slug=str(data.get("slug") or ""),
        title=str(data.get("title") or ""),
        excerpt="",
        score=data.get("score") if isinstance(data.get("score"), int | float) else None,
    )


def _looks_french(row: answers.Answer) -> bool:
    trace = row.trace or {}
    info = trace.get("info", {}) if isinstance(trace, dict) else {}
    return bool(isinstance(info, dict) and info.get("language") == "fr")


__all__ = ["AnswerPipeline", "Outcome", "Zone"]
