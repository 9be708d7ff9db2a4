"""The webhook receiver: Discourse's signed deliveries in, post ids onto the queue, 200 within milliseconds.

Order of checks (docs/intake.md): read the raw body (413 over the limit, without reading the rest), verify
``X-Discourse-Event-Signature`` (HMAC-SHA256 of the raw bytes, constant-time) before parsing (401),
parse with pydantic (400), then decide cheaply whether the bot is addressed, dedupe on (event, post id,
version) with a Redis ``SET NX`` key, and enqueue ids only. With no secret configured nothing is
accepted. ``/healthz``: process up; ``/readyz``: Redis answers; ``/metrics``: Prometheus.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Protocol

import dramatiq
import pydantic
import redis as redis_lib
import redis.asyncio as aredis_lib
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from worker.addressing import BotIdentity, decide
from worker.dedupe import dedupe_key
from worker.domain import ForumPost
from worker.settings import Settings

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhooks/discourse"
QUESTION_EVENTS = frozenset({"post_created", "post_edited"})
# post_created is here too: a new post is indexed as soon as it exists (the bot's own are skipped).
POST_REFRESH_EVENTS = frozenset({"post_created", "post_edited", "post_destroyed", "post_recovered"})
# Deleting a topic sends post_destroyed for its first post only, plus topic_destroyed; recovering it,
# post_recovered and topic_recovered. Each of them re-checks the whole topic.
TOPIC_REFRESH_EVENTS = frozenset({"topic_edited", "topic_destroyed", "topic_recovered"})
FIRST_POST_TOPIC_EVENTS = {"post_destroyed": "topic_destroyed", "post_recovered": "topic_recovered"}
MIN_SECRET_CHARS = 12

Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
SmallInt = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


class Intake(Protocol):
    """Where accepted deliveries go: the queue (``worker.actors.DramatiqIntake``) or a test's list."""

    def question(self, post_id: int, topic_id: int, version: int, reply_to: int | None = None) -> None:
        """Enqueue a question; ``reply_to`` asks the worker to confirm first that the post it replies to
        (that post number of the topic) is the bot's."""

    def refresh_post(self, post_id: int, event: str) -> None: ...

    def refresh_topic(self, topic_id: int, event: str) -> None: ...


class _ReplyTo(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    username: str | None = None


class WebhookPost(BaseModel):
    """The fields of Discourse's WebHookPostSerializer the receiver reads."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: Id
    topic_id: Id
    post_number: SmallInt = 0
    raw: str | None = None
    cooked: str | None = None
    username: str = ""
    user_id: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    post_type: SmallInt = 1
    reply_to_post_number: SmallInt | None = None
    reply_to_user: _ReplyTo | None = None
    topic_archetype: str | None = "regular"
    hidden: bool = False
    deleted_at: str | None = None
    user_deleted: bool = False
    version: SmallInt = 1

    def to_domain(self) -> ForumPost:
        return ForumPost(
            id=self.id,
            topic_id=self.topic_id,
            post_number=self.post_number,
            username=self.username,
            user_id=self.user_id,
            raw=self.raw,
            cooked=self.cooked or "",
            post_type=self.post_type,
            reply_to_post_number=self.reply_to_post_number,
            reply_to_username=self.reply_to_user.username if self.reply_to_user else None,
            version=self.version,
            hidden=self.hidden,
            deleted=self.deleted_at is not None or self.user_deleted,
            archetype=self.topic_archetype or "regular",
        )


class PostEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    post: WebhookPost


class _TopicId(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: Id


class TopicEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    topic: _TopicId


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


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Discourse-Event-Signature`` value Discourse sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    """Constant-time check of ``header`` against the HMAC-SHA256 of the raw body."""
    if not secret or not header:
        return False
    expected = sign(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("utf-8", "replace"))


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
) -> Starlette:
    """The ASGI app. ``intake`` receives accepted ids; ``redis`` (an asyncio client, closed at shutdown)
    holds the dedupe keys and answers /readyz. Only the enqueue itself is a blocking call."""
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
    ttl = settings.limits.webhook_dedupe_ttl_s
    namespace = settings.redis.namespace
    m = metrics or WebhookMetrics()

    def done(started: float, outcome: str, status: int, detail: str = "ok") -> Response:
        m.deliveries.labels(outcome).inc()
        m.ack_seconds.observe(clock() - started)
        return JSONResponse({"status": detail, "outcome": outcome}, status_code=status)

    async def accept_question(post: WebhookPost, event: str) -> str:
        decision = decide(post.to_domain(), bot)
        if not decision.addressed and not decision.needs_confirmation:
            log.debug("post %d ignored: %s", post.id, decision.reason)
            return decision.reason
        key = dedupe_key(namespace, event, post.id, post.version)
        if not await redis.set(key, b"1", nx=True, ex=ttl):
            return "duplicate"
        try:
            reply_to = post.reply_to_post_number if decision.needs_confirmation else None
            intake.question(post.id, post.topic_id, post.version, reply_to)
        except Exception:
            await redis.delete(key)
            raise
        log.info("question enqueued", extra={"post_id": post.id, "topic_id": post.topic_id})
        return "enqueued"

    async def receive(request: Request) -> Response:
        started = clock()
        try:
            body = await read_body(request, limit)
        except _TooLarge:
            return done(started, "too_large", 413, "payload too large")
        if not signature_ok(secret, body, request.headers.get("x-discourse-event-signature")):
            return done(started, "unauthorized", 401, "invalid or missing signature")
        event_type = request.headers.get("x-discourse-event-type", "")
        event = request.headers.get("x-discourse-event", "")
        if event_type == "ping" or event == "ping":
            return done(started, "ping", 200)
        try:
            if event in QUESTION_EVENTS or event in POST_REFRESH_EVENTS:
                post = PostEnvelope.model_validate_json(body).post
                outcome = "refresh"
                if event in POST_REFRESH_EVENTS:
                    intake.refresh_post(post.id, event)
                if event in FIRST_POST_TOPIC_EVENTS and post.post_number == 1:
                    intake.refresh_topic(post.topic_id, FIRST_POST_TOPIC_EVENTS[event])
                if event in QUESTION_EVENTS:
                    result = await accept_question(post, event)
                    if event == "post_created" or result in ("enqueued", "duplicate"):
                        outcome = result
                return done(started, outcome, 200)
            if event in TOPIC_REFRESH_EVENTS:
                topic = TopicEnvelope.model_validate_json(body).topic
                intake.refresh_topic(topic.id, event)
                return done(started, "refresh", 200)
        except pydantic.ValidationError:
            return done(started, "bad_request", 400, "body is not a Discourse webhook payload")
        except (redis_lib.RedisError, dramatiq.errors.BrokerError, OSError) as exc:
            log.error("cannot enqueue: %s", type(exc).__name__)
            return done(started, "unavailable", 503, "queue unavailable")
        return done(started, "unknown_event", 200, "ignored")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
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
    return app
