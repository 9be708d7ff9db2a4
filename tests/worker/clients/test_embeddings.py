"""Embedding clients over fake transports answering with the real services' JSON and error bodies."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import httpx
import pytest

from worker.clients.embeddings import OllamaEmbedder, OpenAIEmbedder, TeiEmbedder, build_embedder
from worker.errors import (
    AuthError,
    ConfigError,
    IndexMismatchError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    ValidationError,
)
from worker.protocols import Embedder
from worker.settings import EmbeddingsSettings, Settings
from worker.testing.models import FakeEmbedder

BASE = "http://embed.test"
DIM = 8

Handler = Callable[[httpx.Request], httpx.Response]


def raw_vector(seed: int, dim: int = DIM) -> list[float]:
    """A deterministic, deliberately non-normalised vector."""
    return [float((seed * 7 + i * 3) % 11 + 1) for i in range(dim)]


def unit(v: list[float]) -> list[float]:
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def cfg(provider: str = "tei", **extra: object) -> EmbeddingsSettings:
    base: dict[str, object] = {
        "provider": provider,
        "base_url": BASE,
        "model": "test/model",
        "dimension": DIM,
        "batch_size": 4,
    }
    base.update(extra)
    return EmbeddingsSettings(**base)  # type: ignore[arg-type]


class Recorder:
    """A MockTransport handler that records the requests and answers with ``respond``."""

    def __init__(self, respond: Handler) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.respond(request)

    def bodies(self) -> list[dict[str, object]]:
        return [json.loads(r.content) for r in self.requests]


def client(handler: Handler) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


# --- TEI ------------------------------------------------------------------------------------------


def tei_ok(request: httpx.Request) -> httpx.Response:
    inputs = json.loads(request.content)["inputs"]
    return httpx.Response(200, json=[raw_vector(len(t)) for t in inputs])


def test_tei_sends_its_contract_batches_and_normalises() -> None:
    rec = Recorder(tei_ok)
    embedder = TeiEmbedder(client(rec), cfg())
    texts = [f"text number {i}" + "x" * i for i in range(10)]
    vectors = embedder.embed(texts)

    assert [r.url.path for r in rec.requests] == ["/embed"] * 3  # 4 + 4 + 2
    bodies = rec.bodies()
    assert [len(b["inputs"]) for b in bodies] == [4, 4, 2]  # type: ignore[arg-type]
    assert all(b["truncate"] is True and b["normalize"] is True for b in bodies)
    assert vectors == [pytest.approx(unit(raw_vector(len(t)))) for t in texts]
    assert embedder.model == "test/model"
    assert embedder.dimension == DIM
    assert isinstance(embedder, Embedder)


def test_prefixes_follow_the_kind_of_text() -> None:
    rec = Recorder(tei_ok)
    embedder = TeiEmbedder(client(rec), cfg(query_prefix="query: ", passage_prefix="passage: "))
    embedder.embed(["how do I?"], kind="query")
    embedder.embed(["an answer"])
    assert [b["inputs"] for b in rec.bodies()] == [["query: how do I?"], ["passage: an answer"]]


def test_tei_adopts_the_servers_lower_batch_limit() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        n = len(json.loads(request.content)["inputs"])
        if n > 2:
            body = {"error": f"batch size {n} > maximum allowed batch size 2", "error_type": "Validation"}
            return httpx.Response(422, json=body)
        return tei_ok(request)

    rec = Recorder(respond)
    embedder = TeiEmbedder(client(rec), cfg())
    vectors = embedder.embed([f"t{i}" for i in range(5)])
    assert len(vectors) == 5
    assert [len(b["inputs"]) for b in rec.bodies()] == [4, 2, 2, 1]  # type: ignore[arg-type]
    assert embedder.batch_size == 2


@pytest.mark.parametrize(
    ("status", "body", "error", "error_type"),
    [
        (400, {"error": "`inputs` cannot be empty", "error_type": "Empty"}, ValidationError, "Empty"),
        (413, {"error": "batch size 64 > maximum allowed batch size 64", "error_type": "Validation"},
         ValidationError, "Validation"),
        (422, {"error": "Input validation error: `inputs` must have less than 512 tokens. Given: 900",
               "error_type": "Validation"}, ValidationError, "Validation"),
        (422, {"error": "tokenizer error", "error_type": "Tokenizer"}, ValidationError, "Tokenizer"),
        (424, {"error": "Backend error: Inference failed", "error_type": "Backend"},
         ServiceUnavailableError, None),
        (429, {"error": "Model is overloaded", "error_type": "Overloaded"}, RateLimitedError, None),
        (503, {"error": "unhealthy", "error_type": "Unhealthy"}, ServiceUnavailableError, None),
    ],
)  # fmt: skip
def test_tei_error_bodies_map_to_our_errors(
    status: int, body: dict[str, str], error: type[Exception], error_type: str | None
) -> None:
    embedder = TeiEmbedder(client(lambda r: httpx.Response(status, json=body)), cfg())
    with pytest.raises(error) as info:
        embedder.embed(["a"])
    assert info.value.status == status  # type: ignore[attr-defined]
    assert info.value.message == body["error"]  # type: ignore[attr-defined]
    assert info.value.service == "tei-embed"  # type: ignore[attr-defined]
    if error_type is not None:
        assert info.value.details == (error_type,)  # type: ignore[attr-defined]


def test_tei_plain_text_413_for_an_oversized_body() -> None:
    respond = lambda r: httpx.Response(413, text="Failed to buffer the request body: length limit exceeded")  # noqa: E731
    with pytest.raises(ValidationError, match="length limit exceeded") as info:
        TeiEmbedder(client(respond), cfg()).embed(["huge"])
    assert info.value.status == 413


def test_rate_limit_carries_retry_after() -> None:
    respond = lambda r: httpx.Response(  # noqa: E731
        429, json={"error": "Model is overloaded", "error_type": "Overloaded"}, headers={"Retry-After": "3"}
    )
    with pytest.raises(RateLimitedError) as info:
        TeiEmbedder(client(respond), cfg()).embed(["a"])
    assert info.value.retry_after == 3.0


def test_wrong_dimension_is_an_index_mismatch() -> None:
    respond = lambda r: httpx.Response(200, json=[raw_vector(1, dim=DIM + 2)])  # noqa: E731
    with pytest.raises(IndexMismatchError, match="10-d vector but CITEBOT_EMBEDDINGS__DIMENSION says 8"):
        TeiEmbedder(client(respond), cfg()).embed(["a"])


@pytest.mark.parametrize(
    "body",
    [
        {"embeddings": []},  # not a list at all
        [[0.0] * DIM],  # zero vector
        [["a"] * DIM],  # not numbers
        [raw_vector(1), raw_vector(2)],  # two vectors for one text
    ],
)
def test_bad_payloads_are_permanent(body: object) -> None:
    with pytest.raises(PermanentError):
        TeiEmbedder(client(lambda r: httpx.Response(200, json=body)), cfg()).embed(["a"])


def test_non_json_success_is_transient() -> None:
    """A proxy's page or a restarting server: retried, as from every service (worker/clients/http.py)."""
    respond = lambda r: httpx.Response(200, text="<html>proxy</html>")  # noqa: E731
    with pytest.raises(ServiceUnavailableError, match="not JSON"):
        TeiEmbedder(client(respond), cfg()).embed(["a"])


@pytest.mark.parametrize("exc", [httpx.ConnectError("connection refused"), httpx.ReadTimeout("timed out")])
def test_transport_failures_are_unavailable(exc: httpx.HTTPError) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(ServiceUnavailableError) as info:
        TeiEmbedder(client(respond), cfg()).embed(["a"])
    assert info.value.status is None


def test_tei_info_records_the_served_model() -> None:
    info = {
        "model_id": "BAAI/bge-m3",
        "model_sha": None,
        "model_dtype": "float16",
        "model_type": {"embedding": {"pooling": "cls"}},
        "max_concurrent_requests": 512,
        "max_input_length": 8192,
        "max_batch_tokens": 16384,
        "max_batch_requests": None,
        "max_client_batch_size": 32,
        "auto_truncate": True,
        "tokenization_workers": 8,
        "version": "1.5.0",
        "sha": None,
        "docker_label": None,
    }
    embedder = TeiEmbedder(client(lambda r: httpx.Response(200, json=info)), cfg())
    assert embedder.info()["max_client_batch_size"] == 32
    assert embedder.served_model == "BAAI/bge-m3"


def test_empty_input_makes_no_request() -> None:
    rec = Recorder(tei_ok)
    assert TeiEmbedder(client(rec), cfg()).embed([]) == []
    assert rec.requests == []


# --- Ollama ---------------------------------------------------------------------------------------


def test_ollama_contract() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(
            200,
            json={
                "model": body["model"],
                "embeddings": [raw_vector(len(t)) for t in body["input"]],
                "total_duration": 14143917,
                "load_duration": 1019500,
                "prompt_eval_count": 8,
            },
        )

    rec = Recorder(respond)
    embedder = OllamaEmbedder(client(rec), cfg("ollama"))
    vectors = embedder.embed(["why", "is the sky blue"])
    assert rec.requests[0].url == f"{BASE}/api/embed"
    assert rec.bodies()[0] == {"model": "test/model", "input": ["why", "is the sky blue"], "truncate": True}
    assert vectors[1] == pytest.approx(unit(raw_vector(15)))
    assert embedder.served_model == "test/model"


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, ValidationError), (404, NotFoundError), (500, ServiceUnavailableError)],
)
def test_ollama_errors(status: int, error: type[Exception]) -> None:
    message = 'model "test/model" not found, try pulling it first'
    embedder = OllamaEmbedder(
        client(lambda r: httpx.Response(status, json={"error": message})), cfg("ollama")
    )
    with pytest.raises(error, match="try pulling it first"):
        embedder.embed(["a"])


def test_ollama_without_embeddings_is_permanent() -> None:
    respond = lambda r: httpx.Response(200, json={"model": "m"})  # noqa: E731
    with pytest.raises(PermanentError, match="embeddings"):
        OllamaEmbedder(client(respond), cfg("ollama")).embed(["a"])


# --- OpenAI-compatible ----------------------------------------------------------------------------


def openai_ok(request: httpx.Request) -> httpx.Response:
    texts = json.loads(request.content)["input"]
    data = [{"object": "embedding", "index": i, "embedding": raw_vector(len(t))} for i, t in enumerate(texts)]
    data.reverse()  # the spec orders by `index`, not by position: make the client honour it
    return httpx.Response(
        200,
        json={
            "object": "list",
            "data": data,
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 5},
        },
    )


@pytest.mark.parametrize("base_url", [BASE, f"{BASE}/v1", f"{BASE}/v1/"])
def test_openai_contract(base_url: str) -> None:
    rec = Recorder(openai_ok)
    embedder = OpenAIEmbedder(client(rec), cfg("openai", base_url=base_url, api_key="sk-test"))
    vectors = embedder.embed(["a", "bbb", "cc"])
    assert rec.requests[0].url == f"{BASE}/v1/embeddings"
    assert rec.requests[0].headers["authorization"] == "Bearer sk-test"
    assert rec.bodies()[0] == {"model": "test/model", "input": ["a", "bbb", "cc"], "encoding_format": "float"}
    assert vectors == [pytest.approx(unit(raw_vector(n))) for n in (1, 3, 2)]
    assert embedder.served_model == "text-embedding-3-small"


def test_openai_says_query_or_passage_only_when_asked() -> None:
    rec = Recorder(openai_ok)
    OpenAIEmbedder(client(rec), cfg("openai", input_type=True)).embed(["q"], kind="query")
    OpenAIEmbedder(client(rec), cfg("openai", input_type=True)).embed(["p"])
    OpenAIEmbedder(client(rec), cfg("openai")).embed(["p"], kind="query")
    assert [b.get("input_type") for b in rec.bodies()] == ["query", "passage", None]


def test_openai_sends_no_authorization_without_a_key() -> None:
    rec = Recorder(openai_ok)
    OpenAIEmbedder(client(rec), cfg("openai")).embed(["a"])
    assert "authorization" not in rec.requests[0].headers


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                         "param": None, "code": "invalid_api_key"}}, AuthError, "Incorrect API key"),
        (429, {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
         RateLimitedError, "Rate limit reached"),
        (400, {"object": "error", "message": "This model's maximum context length is 512 tokens",
               "type": "BadRequestError", "param": None, "code": 400}, ValidationError, "maximum context"),
        (404, {"detail": "Not Found"}, NotFoundError, "Not Found"),
        (502, "<html>Bad Gateway</html>", ServiceUnavailableError, "Bad Gateway"),
        (418, {"error": {"message": "I'm a teapot", "type": "teapot"}}, PermanentError, "teapot"),
    ],
)  # fmt: skip
def test_openai_error_shapes(status: int, body: object, error: type[Exception], message: str) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    with pytest.raises(error, match=message):
        OpenAIEmbedder(client(respond), cfg("openai")).embed(["a"])


def test_openai_bad_indices_are_permanent() -> None:
    body = {"data": [{"index": 3, "embedding": raw_vector(1)}], "model": "m"}
    with pytest.raises(PermanentError, match="index"):
        OpenAIEmbedder(client(lambda r: httpx.Response(200, json=body)), cfg("openai")).embed(["a"])


# --- factory and fakes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "kind"), [("tei", TeiEmbedder), ("ollama", OllamaEmbedder), ("openai", OpenAIEmbedder)]
)
def test_build_embedder_picks_the_provider(provider: str, kind: type) -> None:
    settings = Settings(embeddings=cfg(provider))  # type: ignore[call-arg]
    assert isinstance(build_embedder(settings, client(tei_ok)), kind)


def test_http_providers_need_a_base_url_and_a_client() -> None:
    with pytest.raises(ConfigError, match="BASE_URL"):
        build_embedder(Settings(embeddings=cfg("tei", base_url=None)), client(tei_ok))  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="HTTP client"):
        build_embedder(Settings(embeddings=cfg("ollama")), None)  # type: ignore[call-arg]


def test_fake_embedder_is_deterministic_and_records_calls() -> None:
    fake = FakeEmbedder(dimension=16)
    a, b, c = fake.embed(["render path shadows", "Shadows, render path", "audio mixer volume"])
    assert fake.embed(["render path shadows"])[0] == a
    assert sum(x * y for x, y in zip(a, b, strict=True)) == pytest.approx(1.0)  # same words
    assert sum(x * y for x, y in zip(a, c, strict=True)) < 0.9
    assert math.sqrt(sum(x * x for x in c)) == pytest.approx(1.0)
    assert [call.kind for call in fake.calls] == ["passage", "passage"]
    assert isinstance(fake, Embedder)
    fake.fail_with = ServiceUnavailableError("down", service="fake")
    with pytest.raises(ServiceUnavailableError):
        fake.embed(["x"], kind="query")
    assert fake.calls[-1].kind == "query"
