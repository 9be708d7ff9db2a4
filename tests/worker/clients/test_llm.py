"""OpenAIChatClient over respx: request shape, usage, retries, and each server's error shapes."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import respx
from pydantic import SecretStr

from worker.clients.llm import (
    OpenAIChatClient,
    chat_completions_url,
    cut_to_last_sentence,
)
from worker.domain import Usage
from worker.errors import (
    AuthError,
    ConfigError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    ValidationError,
)
from worker.protocols import ChatModel
from worker.settings import LlmSettings

BASE = "http://llm.test:11434"
URL = f"{BASE}/v1/chat/completions"
MESSAGES = [{"role": "system", "content": "You are citebot."}, {"role": "user", "content": "How? [[1]]"}]
KEY = "sk-test-secret-key-123456"


def ok_body(text: str = "Use SetShadowMapSize [[1]].", **extra: object) -> dict[str, object]:
    """A completion as Ollama's /v1/chat/completions returns it."""
    body: dict[str, object] = {
        "id": "chatcmpl-593",
        "object": "chat.completion",
        "created": 1732960000,
        "model": "llama3.1:8b",
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 812, "completion_tokens": 41, "total_tokens": 853},
    }
    body.update(extra)
    return body


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def make(http: httpx.Client, sleeps: Sleeps, **overrides: object) -> OpenAIChatClient:
    settings = LlmSettings.model_validate({"base_url": BASE, "max_retries": 3, **overrides})
    return OpenAIChatClient(http, settings, sleep=sleeps)


# -- success -----------------------------------------------------------------------------------------


@respx.mock
def test_posts_the_request_and_parses_text_model_and_usage(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(200, json=ok_body()))
    client = make(http, sleeps, model="llama3.1:8b", max_tokens=321, temperature=0.1)
    assert isinstance(client, ChatModel)
    assert client.name == "llama3.1:8b"
    completion = client.complete(MESSAGES)
    assert completion.text == "Use SetShadowMapSize [[1]]."
    assert completion.model == "llama3.1:8b"
    assert completion.usage == Usage(prompt_tokens=812, completion_tokens=41)
    assert completion.offline is False
    request = route.calls.last.request
    assert json.loads(request.content) == {
        "model": "llama3.1:8b",
        "messages": MESSAGES,
        "max_tokens": 321,
        "temperature": 0.1,
        "stream": False,
    }
    assert "authorization" not in request.headers
    assert sleeps == []


@pytest.mark.parametrize(
    ("base", "setting", "field"),
    [
        (BASE, "auto", "max_tokens"),  # Ollama, vLLM, llama.cpp
        ("https://api.openai.com/v1", "auto", "max_completion_tokens"),
        (BASE, "max_completion_tokens", "max_completion_tokens"),
        ("https://api.openai.com/v1", "max_tokens", "max_tokens"),
    ],
)
def test_token_limit_field_follows_the_setting(base: str, setting: str, field: str, sleeps: Sleeps) -> None:
    settings = LlmSettings.model_validate({"base_url": base, "token_limit_param": setting, "max_tokens": 99})
    with respx.mock, httpx.Client() as http:
        route = respx.post(chat_completions_url(base)).mock(return_value=httpx.Response(200, json=ok_body()))
        OpenAIChatClient(http, settings, sleep=sleeps).complete(MESSAGES)
        body = json.loads(route.calls.last.request.content)
    assert body[field] == 99
    assert {"max_tokens", "max_completion_tokens"} - {field} & body.keys() == set()


def test_token_limit_field_is_checked_when_settings_load() -> None:
    with pytest.raises(ValueError, match="token_limit_param"):
        LlmSettings.model_validate({"base_url": BASE, "token_limit_param": "max_output_tokens"})


@respx.mock
def test_bearer_key_only_when_set(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(200, json=ok_body()))
    make(http, sleeps, api_key=SecretStr(KEY)).complete(MESSAGES)
    assert route.calls.last.request.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h:8000", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "http://h:8000/v1/chat/completions"),
        ("https://api.example/openai/v1", "https://api.example/openai/v1/chat/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
    ],
)
def test_base_url_with_or_without_v1(base: str, url: str) -> None:
    assert chat_completions_url(base) == url


@respx.mock
def test_missing_usage_and_model_fall_back(http: httpx.Client, sleeps: Sleeps) -> None:
    body = ok_body()
    del body["usage"]
    body["model"] = ""
    respx.post(URL).mock(return_value=httpx.Response(200, json=body))
    completion = make(http, sleeps, model="qwen2.5").complete(MESSAGES)
    assert completion.usage == Usage(0, 0)
    assert completion.model == "qwen2.5"


@respx.mock
def test_reasoning_block_is_stripped(http: httpx.Client, sleeps: Sleeps) -> None:
    respx.post(URL).mock(
        return_value=httpx.Response(200, json=ok_body("<think>\nplan\n</think>\n\nAnswer [[2]]."))
    )
    assert make(http, sleeps).complete(MESSAGES).text == "Answer [[2]]."


def test_unset_base_url_is_a_config_error(http: httpx.Client) -> None:
    with pytest.raises(ConfigError, match="CITEBOT_LLM__BASE_URL"):
        OpenAIChatClient(http, LlmSettings.model_validate({}))


# -- retries -----------------------------------------------------------------------------------------


@respx.mock
def test_500_500_200_gives_one_completion_after_three_calls(http: httpx.Client, sleeps: Sleeps) -> None:
    vllm_500 = {"error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}}
    route = respx.post(URL).mock(
        side_effect=[
            httpx.Response(500, json=vllm_500),
            httpx.Response(500, json=vllm_500),
            httpx.Response(200, json=ok_body()),
        ]
    )
    completion = make(http, sleeps).complete(MESSAGES)
    assert completion.text == "Use SetShadowMapSize [[1]]."
    assert route.call_count == 3
    assert sleeps == [1.0, 2.0]


@respx.mock
def test_429_honours_retry_after(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(
        side_effect=[
            httpx.Response(
                429,
                headers={"Retry-After": "7"},
                json={
                    "error": {
                        "message": "Rate limit reached",
                        "type": "requests",
                        "code": "rate_limit_exceeded",
                    }
                },
            ),
            httpx.Response(200, json=ok_body()),
        ]
    )
    assert make(http, sleeps).complete(MESSAGES).text.startswith("Use")
    assert route.call_count == 2
    assert sleeps == [7.0]


@respx.mock
def test_429_asking_longer_than_the_cap_propagates_at_once(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(429, headers={"Retry-After": "120"}, json={}))
    with pytest.raises(RateLimitedError) as info:
        make(http, sleeps).complete(MESSAGES)
    assert info.value.retry_after == 120.0
    assert info.value.status == 429
    assert route.call_count == 1
    assert sleeps == []


@respx.mock
def test_429_without_retry_after_backs_off(http: httpx.Client, sleeps: Sleeps) -> None:
    respx.post(URL).mock(
        side_effect=[httpx.Response(429, text="Too Many Requests"), httpx.Response(200, json=ok_body())]
    )
    make(http, sleeps).complete(MESSAGES)
    assert sleeps == [1.0]


@respx.mock
def test_retries_exhausted_propagate_the_transient_error(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(503, json={"error": "service unavailable"}))
    with pytest.raises(ServiceUnavailableError) as info:
        make(http, sleeps, max_retries=2).complete(MESSAGES)
    assert info.value.status == 503
    assert info.value.service == "llm"
    assert route.call_count == 3
    assert sleeps == [1.0, 2.0]


@respx.mock
def test_backoff_is_capped(http: httpx.Client, sleeps: Sleeps) -> None:
    respx.post(URL).mock(return_value=httpx.Response(502, text="Bad Gateway"))
    with pytest.raises(ServiceUnavailableError):
        make(http, sleeps, max_retries=8).complete(MESSAGES)
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0, 20.0]


@respx.mock
def test_zero_retries_means_one_call(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(500, json={}))
    with pytest.raises(ServiceUnavailableError):
        make(http, sleeps, max_retries=0).complete(MESSAGES)
    assert route.call_count == 1


@respx.mock
def test_timeouts_and_refused_connections_are_retried(http: httpx.Client, sleeps: Sleeps) -> None:
    route = respx.post(URL).mock(
        side_effect=[
            httpx.ReadTimeout("slow"),
            httpx.ConnectError("refused"),
            httpx.Response(200, json=ok_body()),
        ]
    )
    assert make(http, sleeps).complete(MESSAGES).text.startswith("Use")
    assert route.call_count == 3


@respx.mock
def test_timeout_after_retries_is_service_unavailable(http: httpx.Client, sleeps: Sleeps) -> None:
    respx.post(URL).mock(side_effect=httpx.ConnectTimeout("slow"))
    with pytest.raises(ServiceUnavailableError, match="timed out"):
        make(http, sleeps, max_retries=1).complete(MESSAGES)


def test_the_configured_timeout_is_applied(sleeps: Sleeps) -> None:
    seen: list[dict[str, float | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=ok_body())

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        make(client, sleeps, timeout_s=12.5).complete(MESSAGES)
    assert seen[0]["read"] == 12.5


# -- error shapes of each server ---------------------------------------------------------------------

SHAPES = [
    # Ollama, OpenAI-compatible route: model not pulled.
    pytest.param(
        404,
        {
            "error": {
                "message": 'model "llama9" not found, try pulling it first',
                "type": "api_error",
                "param": None,
                "code": None,
            }
        },
        NotFoundError,
        'model "llama9" not found',
        id="ollama-404",
    ),
    # Ollama native error shape.
    pytest.param(
        400, {"error": "invalid message format"}, ValidationError, "invalid message format", id="ollama-flat"
    ),
    # vLLM (current): nested error.
    pytest.param(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens. "
                "However, you requested 9000 tokens.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        ValidationError,
        "maximum context length is 8192",
        id="vllm-nested",
    ),
    # vLLM (older): flat ErrorResponse.
    pytest.param(
        400,
        {
            "object": "error",
            "message": "The model `gpt-x` does not exist.",
            "type": "NotFoundError",
            "param": None,
            "code": 404,
        },
        ValidationError,
        "The model `gpt-x` does not exist.",
        id="vllm-flat",
    ),
    # llama.cpp server.
    pytest.param(
        400,
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size",
                "type": "invalid_request_error",
            }
        },
        ValidationError,
        "exceeds the available context size",
        id="llamacpp-400",
    ),
    pytest.param(
        401,
        {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}},
        AuthError,
        "",
        id="llamacpp-401",
    ),
    pytest.param(
        422,
        {"detail": [{"loc": ["body", "messages"], "msg": "field required"}]},
        ValidationError,
        "field required",
        id="fastapi-422",
    ),
    pytest.param(409, "Conflict", PermanentError, "Conflict", id="plain-text-409"),
]


@respx.mock
@pytest.mark.parametrize(("status", "body", "error", "detail"), SHAPES)
def test_permanent_error_shapes(
    http: httpx.Client, sleeps: Sleeps, status: int, body: object, error: type[Exception], detail: str
) -> None:
    response = (
        httpx.Response(status, text=body) if isinstance(body, str) else httpx.Response(status, json=body)
    )
    route = respx.post(URL).mock(return_value=response)
    with pytest.raises(error) as info:
        make(http, sleeps).complete(MESSAGES)
    assert isinstance(info.value, PermanentError)
    assert info.value.status == status
    assert detail in " ".join(info.value.details)
    assert route.call_count == 1  # never retried
    assert sleeps == []


@respx.mock
@pytest.mark.parametrize(
    "response",
    [
        pytest.param(
            httpx.Response(
                503, json={"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            ),
            id="llamacpp-loading",
        ),
        pytest.param(
            httpx.Response(
                500,
                json={
                    "object": "error",
                    "message": "engine dead",
                    "type": "InternalServerError",
                    "code": 500,
                },
            ),
            id="vllm-flat-500",
        ),
        pytest.param(
            httpx.Response(500, json={"error": "llama runner process has terminated"}), id="ollama-500"
        ),
        pytest.param(httpx.Response(502, text="<html><body>502 Bad Gateway</body></html>"), id="proxy-html"),
        pytest.param(
            httpx.Response(200, json={"error": {"message": "upstream failed", "code": 500}}),
            id="error-in-200",
        ),
        pytest.param(
            httpx.Response(200, json={"object": "error", "message": "busy", "code": 429}),
            id="flat-error-in-200",
        ),
        pytest.param(httpx.Response(200, json=ok_body(choices=[])), id="empty-choices"),
        pytest.param(httpx.Response(200, json=ok_body("   ")), id="blank-content"),
        pytest.param(
            httpx.Response(
                200,
                json=ok_body(
                    choices=[
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": None},
                            "finish_reason": "stop",
                        }
                    ]
                ),
            ),
            id="null-content",
        ),
    ],
)
def test_transient_shapes_are_retried(http: httpx.Client, sleeps: Sleeps, response: httpx.Response) -> None:
    route = respx.post(URL).mock(side_effect=[response, httpx.Response(200, json=ok_body())])
    assert make(http, sleeps).complete(MESSAGES).text == "Use SetShadowMapSize [[1]]."
    assert route.call_count == 2
    assert sleeps == [1.0]


@respx.mock
@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(
            ok_body(
                choices=[
                    {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "length"}
                ]
            ),
            "max_tokens",
            id="empty-length",
        ),
        pytest.param(
            ok_body(choices=[{"index": 0, "message": {"content": ""}, "finish_reason": "content_filter"}]),
            "filter",
            id="content-filter",
        ),
        pytest.param({"id": "x", "object": "chat.completion"}, "no choices", id="no-choices"),
        pytest.param(
            ok_body(choices=[{"message": {"content": ["parts"]}}]), "not text", id="content-not-text"
        ),
        pytest.param([1, 2], "not a JSON object", id="json-list"),
        pytest.param(
            {"error": {"message": "bad request", "code": 400}}, "error in a 200", id="error-400-in-200"
        ),
    ],
)
def test_malformed_or_hopeless_completions_are_permanent(
    http: httpx.Client, sleeps: Sleeps, body: object, match: str
) -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(PermanentError, match=match):
        make(http, sleeps).complete(MESSAGES)
    assert route.call_count == 1


@respx.mock
def test_non_json_200_is_retried_then_transient(http: httpx.Client, sleeps: Sleeps) -> None:
    """A proxy's page instead of the server's answer: transient, as from every service."""
    route = respx.post(URL).mock(return_value=httpx.Response(200, text="<html>login</html>"))
    with pytest.raises(ServiceUnavailableError, match="not JSON"):
        make(http, sleeps).complete(MESSAGES)
    assert route.call_count == 4


@respx.mock
def test_key_and_prompt_never_logged_above_debug(
    http: httpx.Client, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    respx.post(URL).mock(
        side_effect=[
            httpx.Response(
                400, json={"error": {"message": "bad prompt: How? [[1]]", "type": "BadRequestError"}}
            ),
        ]
    )
    caplog.set_level(logging.DEBUG, logger="worker.clients.llm")
    with pytest.raises(ValidationError) as info:
        make(http, sleeps, api_key=SecretStr(KEY)).complete(MESSAGES)
    assert KEY not in str(info.value)
    assert all(KEY not in r.getMessage() for r in caplog.records)
    assert all("How?" not in r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG)
    assert any("How?" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


@respx.mock
def test_retry_warnings_name_the_error_not_the_body(
    http: httpx.Client, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    respx.post(URL).mock(
        side_effect=[
            httpx.Response(500, json={"error": "secret forum text"}),
            httpx.Response(200, json=ok_body()),
        ]
    )
    with caplog.at_level(logging.INFO, logger="worker.clients.llm"):
        make(http, sleeps).complete(MESSAGES)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["LLM call failed (ServiceUnavailableError), retry 1/3 in 1.0 s"]


# -- helpers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("One. Two [[1]]. Three is cu", "One. Two [[1]]."),
        ("Use X. [[1]] And then", "Use X. [[1]]"),
        ("Use X. [[1]][[2, 3]] And", "Use X. [[1]][[2, 3]]"),
        ("Steps:\n- one [[1]]\n- tw", "Steps:\n- one [[1]]"),
        ("Try this. [[1]]\n```cpp\nnode->SetPos", "Try this. [[1]]"),
        ("Version 1.2 is", ""),
    ],
)
def test_cut_to_last_sentence(text: str, kept: str) -> None:
    assert cut_to_last_sentence(text) == kept


@respx.mock
def test_an_answer_cut_by_max_tokens_loses_its_unfinished_sentence(
    http: httpx.Client, sleeps: Sleeps
) -> None:
    body = ok_body()
    body["choices"] = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Raise it [[1]]. Then set the"},
            "finish_reason": "length",
        }
    ]
    respx.post(URL).mock(return_value=httpx.Response(200, json=body))
    assert make(http, sleeps).complete(MESSAGES).text == "Raise it [[1]]."


@respx.mock
def test_an_answer_cut_before_one_sentence_is_permanent(http: httpx.Client, sleeps: Sleeps) -> None:
    body = ok_body()
    body["choices"] = [
        {"index": 0, "message": {"content": "The answer is that you"}, "finish_reason": "length"}
    ]
    route = respx.post(URL).mock(return_value=httpx.Response(200, json=body))
    with pytest.raises(ValidationError, match="before one sentence"):
        make(http, sleeps).complete(MESSAGES)
    assert route.call_count == 1


# -- over a real socket ------------------------------------------------------------------------------


class _SlowThenOk(BaseHTTPRequestHandler):
    """A loopback server: the first request hangs past the client's timeout, later ones answer."""

    hits = 0

    def do_POST(self) -> None:
        type(self).hits += 1
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).hits == 1:
            time.sleep(1.0)
        body = json.dumps(ok_body("Real socket [[1]].")).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up on the slow request

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class names it so)
        pass


def test_a_real_timeout_is_retried_over_loopback(sleeps: Sleeps) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowThenOk)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/v1"
        with httpx.Client() as client:
            llm = OpenAIChatClient(
                client, LlmSettings.model_validate({"base_url": base, "timeout_s": 0.2}), sleep=sleeps
            )
            started = time.monotonic()
            assert llm.complete(MESSAGES).text == "Real socket [[1]]."
            assert time.monotonic() - started < 0.9
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert _SlowThenOk.hits == 2
    assert sleeps == [1.0]
