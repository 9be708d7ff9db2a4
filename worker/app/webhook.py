"""The webhook receiver: Discourse's signed deliveries in, post ids onto the queue, 200 within milliseconds.

Order of checks (docs/intake.md): read the raw body (413 over the limit, without reading the rest; 408 when
it has not arrived within ``limits.webhook_body_timeout_s``), verify ``X-Discourse-Event-Signature``
(HMAC-SHA256 of the raw bytes, constant-time) before parsing (401), parse with pydantic (400), then
decide cheaply whether the bot is addressed and enqueue ids only. With no secret configured nothing is
accepted and ``/readyz`` says not ready.

Only the body is signed: the ``X-Discourse-Event`` header can be changed by anyone who replays a
captured delivery. So no header decides what work a body queues beyond what the body itself says:
a question is deduped on (post id, version), a refresh on the digest of the signed body, and a post is
removed from the index only when the body says it is deleted (``deleted_at``). The contract it applies
(the path, the signature, the bodies, which events are read and what each queues: posts, topics and
their status, categories, reviewables) is ``worker.webhook_events``.

Redis: a delivery makes two round trips (its dedupe keys, then its enqueues), and the deliveries in
flight share them: the commands handed over in one event-loop turn leave on one pipeline
(``worker.redis_batch``), and each delivery is acked only once its own commands have answered. Bursts:
at most ``limits.webhook_redis_connections`` pipelines are in flight on the one pool; a delivery waits
up to ``limits.webhook_redis_wait_s`` for a turn, and only then is shed with a 503 that says so
(outcome ``shed``). A client that disconnects mid-body, a 401 and a 408 are each
logged once per source address per minute (the deliveries metric counts every one), never as a
traceback. ``/healthz``: process up; ``/readyz``: a secret is set and Redis answers; ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import dramatiq
import pydantic
import redis as redis_lib
import redis.asyncio as aredis_lib
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.addressing import BotIdentity, Decision, decide
from worker.dedupe import delivery_key, question_key
from worker.redis_batch import NoTurnError, RedisBatcher, RedisCommand
from worker.settings import Settings
from worker.webhook_events import (
    MOVE_ACTION_CODE,
    REVIEWABLE_RECHECK_S,
    WEBHOOK_PATH,
    CategoryEnvelope,
    PostEnvelope,
    ReviewableEnvelope,
    TopicEnvelope,
    WebhookPost,
    family,
    signature_ok,
)

log = logging.getLogger(__name__)

# Every post event (webhook_events.POST_EVENTS) refreshes the post's index row (a new post is indexed
# as soon as it exists; the bot's own are skipped) and asks it as a question when the body shows it
# addressed: the header only says that the body is a post, so that what a body queues does not depend
# on it.
# Deleting a topic sends post_destroyed for its first post only, plus topic_destroyed; recovering it,
# post_recovered and topic_recovered. Each of them re-checks the whole topic.
FIRST_POST_TOPIC_EVENTS = {"post_destroyed": "topic_destroyed", "post_recovered": "topic_recovered"}
MIN_SECRET_CHARS = 12
# Posts longer than this are parsed for mentions in a worker thread, so that the event loop (other
# deliveries, /healthz) keeps its turn; shorter ones cost well under a millisecond inline.
INLINE_PARSE_CHARS = 8192
LOG_EVERY_S = 60.0


class Intake(Protocol):
    """Where accepted deliveries go: the queue (``worker.actors.DramatiqIntake``) or a test's list."""

    def question(self, post_id: int, topic_id: int, version: int, reply_to: int | None = None) -> None:
        """Enqueue a question; ``reply_to`` asks the worker to confirm first that the post it replies to
        (that post number of the topic) is the bot's."""

    def refresh_post(self, post_id: int, event: str, delay_s: float = 0.0) -> None:
        """Re-read one post's index row; ``delay_s`` later when given."""

    def refresh_topic(self, topic_id: int, event: str) -> None: ...

    def refresh_category(self, category_id: int, event: str) -> None: ...

    def outbox(self) -> contextlib.AbstractContextManager[list[RedisCommand]]:
        """What is enqueued inside the block is not sent: its Redis commands are appended to the yielded
        list, and the webhook sends them (with other deliveries', ``worker.redis_batch``). An intake not
        on Redis (a test's list) records at once and yields an empty list."""
        ...


class WebhookMetrics:
    """Deliveries by outcome and the ack latency, in a registry of their own (one per app)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.deliveries = Counter(
            "citebot_webhook_deliveries",
            "Webhook deliveries by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.ack_seconds = Histogram(
            "citebot_webhook_ack_seconds",
            "Time from request start to the webhook's answer.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )


class OncePerSource:
    """Logs an event at most once per (kind, source address) per ``every_s``, with how many were
    suppressed since: an unauthenticated client cannot flood the log, and an operator still sees it."""

    MAX_SOURCES = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic, every_s: float = LOG_EVERY_S) -> None:
        self.clock = clock
        self.every_s = every_s
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def log(self, level: int, kind: str, source: str, message: str) -> bool:
        """Log ``message`` for this source unless it was logged within ``every_s``; True when logged."""
        now = self.clock()
        last, suppressed = self._seen.get((kind, source), (-self.every_s, 0))
        if now - last < self.every_s:
            self._seen[(kind, source)] = (last, suppressed + 1)
            return False
        if len(self._seen) >= self.MAX_SOURCES:
            self._seen.clear()  # many sources at once: forget them all rather than grow without bound
        self._seen[(kind, source)] = (now, 0)
        log.log(
            level,
            "%s from %s (%d more from it in the last minute not logged)",
            message,
            source,
            suppressed,
            extra={"stage": "webhook", "outcome": kind},
        )
        return True


def redis_for_webhook(settings: Settings) -> aredis_lib.Redis:
    """The webhook app's Redis client: one pool, sized on purpose, whose callers wait for a connection.

    The asyncio client's default pool refuses the 101st concurrent caller at once
    (``MaxConnectionsError``: 100 of 200 concurrent deliveries got 503). The deliveries' pipelines
    take turns in :func:`create_app` (``limits.webhook_redis_connections`` at once); this
    ``BlockingConnectionPool`` holds that many connections plus a few, and makes a caller wait rather
    than fail should it ever run short. Short socket timeouts: with Redis unreachable, deliveries get a
    quick 503 rather than a stalled loop."""
    pool = aredis_lib.BlockingConnectionPool.from_url(
        settings.redis.url,
        # The deliveries' turns (create_app) plus a few for /readyz, so that they never wait here.
        max_connections=settings.limits.webhook_redis_connections + 4,
        timeout=settings.limits.webhook_redis_wait_s,
        socket_connect_timeout=2,
        socket_timeout=2,
    )
    return aredis_lib.Redis.from_pool(pool)  # closing the client closes the pool


def _refresh_event(event: str, post: WebhookPost) -> str:
    """The event the indexer acts on: the body, not the unsigned header, says whether the post is gone
    (a removal deletes without fetching; anything else fetches the post and follows what it finds)."""
    if post.deleted_at is not None:
        return "post_destroyed"
    return "post_edited" if event == "post_destroyed" else event


class _TooLarge(Exception):
    pass


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (``_TooLarge``) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise _TooLarge
        except ValueError:
            pass
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    settings: Settings,
    intake: Intake,
    redis: aredis_lib.Redis,
    *,
    metrics: WebhookMetrics | None = None,
    clock: Callable[[], float] = time.perf_counter,
    source_log: OncePerSource | None = None,
) -> Starlette:
    """The ASGI app. ``intake`` receives accepted ids; ``redis`` (an asyncio client, closed at shutdown;
    :func:`redis_for_webhook` builds the production one) holds the dedupe keys, takes the enqueues and
    answers /readyz. No Redis call blocks the event loop: every delivery's commands go through one
    :class:`~worker.redis_batch.RedisBatcher`, which sends those of concurrent deliveries together."""
    secret = settings.discourse.webhook_secret.get_secret_value().encode("utf-8")
    if not secret:
        log.error("no webhook secret configured (CITEBOT_DISCOURSE__WEBHOOK_SECRET): every delivery gets 401")
    elif len(secret) < MIN_SECRET_CHARS:
        log.warning("webhook secret is shorter than %d characters; Discourse will not sign", MIN_SECRET_CHARS)
    bot = BotIdentity(
        username=settings.discourse.bot_username,
        user_id=settings.discourse.bot_user_id,
        answer_pms=settings.discourse.answer_pms,
    )
    limit = settings.limits.webhook_max_body_bytes
    body_timeout = settings.limits.webhook_body_timeout_s
    ttl = settings.limits.webhook_dedupe_ttl_s
    namespace = settings.redis.namespace
    m = metrics or WebhookMetrics()
    once = source_log or OncePerSource()

    def done(started: float, outcome: str, status: int, detail: str = "ok") -> Response:
        m.deliveries.labels(outcome).inc()
        m.ack_seconds.observe(clock() - started)
        return JSONResponse({"status": detail, "outcome": outcome}, status_code=status)

    async def addressing(post: WebhookPost) -> Decision:
        domain = post.to_domain()
        if len(domain.raw or "") + len(domain.cooked) > INLINE_PARSE_CHARS:
            decision = await asyncio.to_thread(decide, domain, bot)
        else:
            decision = decide(domain, bot)
        if not decision.addressed and not decision.needs_confirmation:
            log.debug("post %d ignored: %s", post.id, decision.reason)
        return decision

    # At most as many pipelines are in flight as the pool has connections; a batch waits for a turn
    # and gives up (503, shed) after the wait. The batcher's semaphore wakes one waiter per release; the
    # pool's own wait would wake every waiter each time (slow with hundreds waiting).
    wait_s = settings.limits.webhook_redis_wait_s
    batcher = RedisBatcher(redis, turns=settings.limits.webhook_redis_connections, wait_s=wait_s)

    async def first_sightings(keys: list[str]) -> list[bool]:
        """SET NX EX every key (with other deliveries' commands); True for each key seen here first."""
        replies = await batcher.run([RedisCommand(("SET", key, b"1", "NX", "EX", ttl)) for key in keys])
        return [bool(r) for r in replies]

    async def forget(keys: list[str]) -> None:
        await batcher.run([RedisCommand(("DEL", *keys))])

    async def enqueue(commands: list[RedisCommand]) -> None:
        """Send the intake's collected enqueues; returns once Redis has answered each of them."""
        await batcher.run(commands)

    async def accept_post(body: bytes, event: str) -> str:
        post = PostEnvelope.model_validate_json(body).post
        decision = await addressing(post)
        # A reply that quotes its parent is asked too; the worker confirms that the parent is the bot's.
        ask = decision.addressed or decision.needs_confirmation
        keys = [delivery_key(namespace, body)]
        if ask:
            keys.append(question_key(namespace, post.id, post.version))
        fresh = await first_sightings(keys)
        taken = [key for key, new in zip(keys, fresh, strict=True) if new]
        try:
            # The refresh and the question leave together (or, on an error, neither), once the block ends.
            with intake.outbox() as commands:
                if fresh[0]:
                    refresh = _refresh_event(event, post)
                    # The bot's own posts never enter the index: refreshing them would only spend API calls.
                    if post.username.lower() != bot.username.lower():
                        intake.refresh_post(post.id, refresh)
                    if refresh in FIRST_POST_TOPIC_EVENTS and post.post_number == 1:
                        intake.refresh_topic(post.topic_id, FIRST_POST_TOPIC_EVENTS[refresh])
                    if post.action_code == MOVE_ACTION_CODE:
                        # PostMover's note in a topic whose posts moved away: follow them.
                        intake.refresh_topic(post.topic_id, "posts_moved")
                queued = ask and fresh[1]
                if queued:
                    reply_to = post.reply_to_post_number if decision.needs_confirmation else None
                    intake.question(post.id, post.topic_id, post.version, reply_to)
            await enqueue(commands)
            if queued:
                log.info("question enqueued", extra={"post_id": post.id, "topic_id": post.topic_id})
                return "enqueued"
        except Exception:
            if taken:
                await forget(taken)
            raise
        if ask or not fresh[0]:
            return "duplicate"
        if event == "post_created":
            return decision.reason
        return "refresh"

    async def refresh_once(body: bytes, send: Callable[[], object]) -> str:
        """Queue ``send``'s refreshes unless this body was seen before (they leave together, or none)."""
        key = delivery_key(namespace, body)
        (fresh,) = await first_sightings([key])
        if not fresh:
            return "duplicate"
        try:
            with intake.outbox() as commands:
                send()
            await enqueue(commands)
        except Exception:
            await forget([key])
            raise
        return "refresh"

    async def accept_topic(body: bytes, event: str) -> str:
        topic = TopicEnvelope.model_validate_json(body).topic
        return await refresh_once(body, lambda: intake.refresh_topic(topic.id, event))

    async def accept_category(body: bytes, event: str) -> str:
        category = CategoryEnvelope.model_validate_json(body).category
        return await refresh_once(body, lambda: intake.refresh_category(category.id, event))

    async def accept_reviewable(body: bytes, event: str) -> str:
        reviewable = ReviewableEnvelope.model_validate_json(body).reviewable
        post_id = reviewable.post_id
        if post_id is None:  # a queued post (no post yet), a user: nothing indexed to re-read
            return "ignored"

        def send() -> None:
            intake.refresh_post(post_id, "reviewable")
            intake.refresh_post(post_id, "reviewable", REVIEWABLE_RECHECK_S)

        return await refresh_once(body, send)

    accept = {
        "post": accept_post,
        "topic": accept_topic,
        "category": accept_category,
        "reviewable": accept_reviewable,
    }

    async def receive(request: Request) -> Response:
        started = clock()
        source = request.client.host if request.client else "unknown"
        try:
            body = await asyncio.wait_for(read_body(request, limit), body_timeout)
        except _TooLarge:
            return done(started, "too_large", 413, "payload too large")
        except TimeoutError:
            once.log(
                logging.INFO, "body_timeout", source, f"webhook body not received within {body_timeout:g} s"
            )
            return done(started, "body_timeout", 408, "request body not received in time")
        except ClientDisconnect:
            once.log(
                logging.INFO, "disconnected", source, "webhook client disconnected before its body ended"
            )
            return done(started, "disconnected", 400, "client disconnected")
        if not signature_ok(secret, body, request.headers.get("x-discourse-event-signature")):
            why = "no webhook secret configured" if not secret else "invalid or missing signature"
            once.log(logging.WARNING, "unauthorized", source, f"webhook delivery refused (401): {why}")
            return done(started, "unauthorized", 401, "invalid or missing signature")
        event_type = request.headers.get("x-discourse-event-type", "")
        event = request.headers.get("x-discourse-event", "")
        if event_type == "ping" or event == "ping":
            return done(started, "ping", 200)
        handler = accept.get(family(event) or "")
        try:
            if handler is not None:
                return done(started, await handler(body, event), 200)
        except pydantic.ValidationError:
            return done(started, "bad_request", 400, "body is not a Discourse webhook payload")
        except NoTurnError:
            once.log(
                logging.WARNING, "shed", source, f"webhook overloaded: no Redis connection in {wait_s:g} s"
            )
            return done(started, "shed", 503, "overloaded: no queue connection free in time, retry later")
        except (redis_lib.RedisError, dramatiq.errors.BrokerError, OSError) as exc:
            log.error("cannot enqueue: %s", type(exc).__name__)
            return done(started, "unavailable", 503, "queue unavailable")
        return done(started, "unknown_event", 200, "ignored")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if not secret:
            reason = (
                "no webhook secret configured (CITEBOT_DISCOURSE__WEBHOOK_SECRET): every delivery gets 401"
            )
            return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
        try:
            await redis.ping()
        except (redis_lib.RedisError, OSError) as exc:
            return JSONResponse({"status": "unavailable", "redis": type(exc).__name__}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def metrics_view(request: Request) -> Response:
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await redis.aclose()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route(WEBHOOK_PATH, receive, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_view, methods=["GET"]),
        ],
    )
    app.state.metrics = m
    app.state.redis = redis
    return app
