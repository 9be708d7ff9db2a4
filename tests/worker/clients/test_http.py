"""The one outbound call path (``worker.clients.http``): the status table, transport failures,
``Retry-After`` in every form, error bodies of every service, non-JSON bodies. Tested once here; the
clients' own tests only check what is theirs."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from worker.clients import http as h
from worker.errors import (
    AuthError,
    CitebotError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    TransientError,
    ValidationError,
)

NOW = 1_700_000_000.0


def _client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(transport=handler, base_url="http://svc")


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (300, PermanentError),
        (400, ValidationError),
        (401, AuthError),
        (403, AuthError),
        (404, NotFoundError),
        (405, PermanentError),
        (408, ServiceUnavailableError),
        (409, PermanentError),
        (413, ValidationError),
        (422, ValidationError),
        (424, ServiceUnavailableError),
        (429, RateLimitedError),
        (500, ServiceUnavailableError),
        (502, ServiceUnavailableError),
        (503, ServiceUnavailableError),
        (504, ServiceUnavailableError),
    ],
)
def test_every_status_maps_to_one_error(status: int, error: type[CitebotError]) -> None:
    response = httpx.Response(status, json={"error": "boom"})
    with pytest.raises(error) as info:
        h.check("svc", response)
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.service == "svc"
    assert isinstance(info.value, TransientError) == (status in (408, 424, 429) or status >= 500)


def test_2xx_passes() -> None:
    h.check("svc", httpx.Response(200, json={}))
    h.check("svc", httpx.Response(204))


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (httpx.ConnectTimeout("slow"), "timed out (ConnectTimeout)"),
        (httpx.ReadTimeout("slow"), "timed out (ReadTimeout)"),
        (httpx.ConnectError("refused"), "unreachable (ConnectError: refused)"),
        (httpx.RemoteProtocolError("closed"), "unreachable (RemoteProtocolError: closed)"),
    ],
)
def test_transport_failures_are_transient(exc: Exception, text: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with _client(httpx.MockTransport(handler)) as http, pytest.raises(ServiceUnavailableError) as info:
        h.send(http, "svc", "POST", "/x", json={"secret": "prompt text"})
    assert info.value.message == text
    assert "prompt text" not in str(info.value)


def test_send_returns_the_response() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(418)

    with _client(httpx.MockTransport(handler)) as http:
        response = h.send(http, "svc", "GET", "/x", params={"q": "1"}, headers={"A": "b"})
    assert response.status_code == 418
    assert seen[0].url.params["q"] == "1"
    assert seen[0].headers["a"] == "b"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 2.5 ", 2.5),
        ("0", 0.0),
        ("-3", 0.0),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_retry_after_header_forms(header: str | None, seconds: float | None) -> None:
    assert h.parse_retry_after(header, now=NOW) == seconds


def test_retry_after_falls_back_to_discourse_wait_seconds() -> None:
    body = {"errors": ["slow down"], "error_type": "rate_limit", "extras": {"wait_seconds": 12}}
    assert h.retry_after(httpx.Response(429, json=body), body) == 12.0
    assert h.retry_after(httpx.Response(429, json=body, headers={"Retry-After": "3"}), body) == 3.0
    assert h.retry_after(httpx.Response(429, json={"extras": {"wait_seconds": True}}), {"extras": {}}) is None
    assert h.retry_after(httpx.Response(429)) is None


def test_429_and_5xx_carry_the_wait() -> None:
    with pytest.raises(RateLimitedError) as limited:
        h.check("svc", httpx.Response(429, headers={"Retry-After": "4"}))
    assert limited.value.retry_after == 4.0
    with pytest.raises(ServiceUnavailableError) as down:
        h.check("svc", httpx.Response(503, headers={"Retry-After": "9"}, text="busy"))
    assert down.value.retry_after == 9.0
    discourse = {"errors": ["too many"], "error_type": "rate_limit", "extras": {"wait_seconds": 40}}
    with pytest.raises(RateLimitedError) as waited:
        h.check("discourse", httpx.Response(429, json=discourse))
    assert waited.value.retry_after == 40.0


@pytest.mark.parametrize(
    ("body", "message", "kind", "details"),
    [
        (
            {"errors": ["Title is too short", "Body is empty"], "error_type": "invalid_parameters"},
            "Title is too short; Body is empty",
            "invalid_parameters",
            ("Title is too short", "Body is empty"),
        ),
        (
            {"error": "Input validation error", "error_type": "Validation"},
            "Input validation error",
            "Validation",
            (),
        ),
        ({"error": "model 'x' not found"}, "model 'x' not found", None, ()),
        (
            {"error": {"message": "bad key", "type": "invalid_request_error", "code": "invalid_api_key"}},
            "bad key",
            "invalid_request_error",
            (),
        ),
        ({"error": {"code": 401}}, '{"code": 401}', "401", ()),
        (
            {"object": "error", "message": "too long", "type": "BadRequestError"},
            "too long",
            "BadRequestError",
            (),
        ),
        ({"detail": "Not Found"}, "Not Found", None, ()),
        (["x"], '["x"]', None, ()),
    ],
)
def test_error_bodies_of_every_service(
    body: object, message: str, kind: str | None, details: tuple[str, ...]
) -> None:
    got = h.error_body(httpx.Response(400, json=body))
    assert (got.message, got.kind, got.details) == (message, kind, details)


def test_error_body_text_and_empty_and_long() -> None:
    assert (
        h.error_body(httpx.Response(502, text="<html>Bad gateway</html>")).message
        == "<html>Bad gateway</html>"
    )
    assert h.error_body(httpx.Response(500, text="")).message == "Internal Server Error"
    assert len(h.error_body(httpx.Response(500, text="x" * 5000)).message) == h.MAX_MESSAGE


def test_messages_and_details() -> None:
    with pytest.raises(ValidationError) as plain:
        h.check(
            "discourse", httpx.Response(422, json={"errors": ["Body too short"]}), what="POST /posts.json"
        )
    assert plain.value.message == "POST /posts.json: Body too short"
    assert plain.value.details == ("Body too short",)
    with pytest.raises(NotFoundError) as typed:
        h.check("tei", httpx.Response(404, json={"error": "no route", "error_type": "NotFound"}))
    assert typed.value.details == ("NotFound",)


def test_redacted_messages_keep_the_service_text_out_of_the_exception_text() -> None:
    quoted = {"error": {"message": "your prompt 'secret question' is too long", "type": "invalid_request"}}
    with pytest.raises(ValidationError) as info:
        h.check("llm", httpx.Response(400, json=quoted), redact=True)
    assert "secret" not in str(info.value)
    assert info.value.message == "request rejected"
    assert info.value.details == ("your prompt 'secret question' is too long",)
    with pytest.raises(ServiceUnavailableError) as down:
        h.check("llm", httpx.Response(503, json=quoted), redact=True)
    assert down.value.message == "HTTP 503 invalid_request"
    with pytest.raises(RateLimitedError) as limited:
        h.check("llm", httpx.Response(429, json=quoted, headers={"Retry-After": "2"}), redact=True)
    assert (limited.value.message, limited.value.retry_after) == ("rate limited", 2.0)


def test_json_body() -> None:
    assert h.json_body("svc", httpx.Response(200, json={"a": 1})) == {"a": 1}
    assert h.json_body("svc", httpx.Response(200, json=[1])) == [1]
    assert h.json_body("svc", httpx.Response(204)) is None
    with pytest.raises(ServiceUnavailableError) as info:
        h.json_body("svc", httpx.Response(200, text="<html>maintenance</html>"), what="GET /x")
    assert info.value.message == "GET /x: answered with a body that is not JSON"
    assert info.value.status == 200
