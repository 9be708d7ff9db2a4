"""The one outbound call path: every request to Discourse, TEI, Ollama or an OpenAI-compatible server.

``send`` makes the request on the injected ``httpx.Client`` and turns transport failures into our error
types; ``check`` turns a non-2xx answer into one by the table below; ``json_body`` reads a 2xx body. The
clients keep only what is theirs (URLs, headers, payloads, what a good body means), so a status means
the same thing whichever service sent it:

===============================  ===========================  =========
failure                          our error                    retried
===============================  ===========================  =========
timeout, connection error        ``ServiceUnavailableError``  yes
408, 424 (TEI: model failed)     ``ServiceUnavailableError``  yes
429                              ``RateLimitedError``         yes, after ``Retry-After``
5xx                              ``ServiceUnavailableError``  yes
400, 413, 422                    ``ValidationError``          no
401, 403                         ``AuthError``                no
404                              ``NotFoundError``            no
any other 4xx, 3xx               ``PermanentError``           no
2xx whose body is not JSON       ``ServiceUnavailableError``  yes (a proxy's or a restarting server's page)
===============================  ===========================  =========

The wait of a 429 or a 5xx is ``Retry-After`` (delta-seconds or an HTTP date), else Discourse's
``extras.wait_seconds``. Error messages are read from any body shape the services use (``error_body``).
A service whose messages can quote our input (the LLM's quote the prompt) asks for ``redact``: its
message goes to ``details`` and the exception's text says only what happened.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

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

MAX_MESSAGE = 300

# Status → error type; anything absent is ServiceUnavailableError from 500 up, PermanentError below.
STATUS_ERRORS: Mapping[int, type[CitebotError]] = {
    400: ValidationError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    408: ServiceUnavailableError,
    413: ValidationError,
    422: ValidationError,
    424: ServiceUnavailableError,
    429: RateLimitedError,
}
# What the exception says when the service's own message must stay out of it (``redact``).
_REDACTED = {
    RateLimitedError: "rate limited",
    AuthError: "key refused",
    NotFoundError: "model or route not found",
    ValidationError: "request rejected",
}


def error_type(status: int) -> type[CitebotError]:
    """Which of our errors a non-2xx status becomes (the table in the module docstring)."""
    known = STATUS_ERRORS.get(status)
    if known is not None:
        return known
    return ServiceUnavailableError if status >= 500 else PermanentError


def send(
    http: httpx.Client,
    service: str,
    method: str,
    url: str,
    *,
    what: str = "",
    outcome: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """``http.request(method, url, **kwargs)``; a timeout or transport failure is ServiceUnavailableError.

    The message names the exception type and httpx's reason (never the request's content), after
    ``what`` (e.g. ``GET /t/1.json``) when given. ``outcome`` (for a client's metrics) hears
    ``"timeout"``, ``"unreachable"`` or the status code.
    """
    prefix = f"{what}: " if what else ""
    try:
        response = http.request(method, url, **kwargs)
    except httpx.TimeoutException as exc:
        if outcome is not None:
            outcome("timeout")
        raise ServiceUnavailableError(f"{prefix}timed out ({type(exc).__name__})", service=service) from None
    except httpx.RequestError as exc:  # connection, protocol, decoding, redirects
        if outcome is not None:
            outcome("unreachable")
        raise ServiceUnavailableError(
            f"{prefix}unreachable ({type(exc).__name__}: {exc})", service=service
        ) from None
    if outcome is not None:
        outcome(str(response.status_code))
    return response


def check(service: str, response: httpx.Response, *, what: str = "", redact: bool = False) -> None:
    """Nothing for a 2xx; else raise our error for it. ``what`` (e.g. ``GET /t/1.json``) prefixes it."""
    if response.is_success:
        return
    raise status_error(service, response, what=what, redact=redact)


def status_error(
    service: str, response: httpx.Response, *, what: str = "", redact: bool = False
) -> CitebotError:
    """Our error for a non-2xx response (see ``check``)."""
    status = response.status_code
    body = error_body(response)
    kind = error_type(status)
    text = (
        _REDACTED.get(kind, f"HTTP {status}" + (f" {body.kind}" if body.kind else ""))
        if redact
        else body.message
    )
    if what:
        text = f"{what}: {text}"
    if issubclass(kind, TransientError):
        return kind(text, service=service, status=status, retry_after=retry_after(response, body.data))
    details = (body.message,) if redact else body.details or ((body.kind,) if body.kind else ())
    permanent = kind if issubclass(kind, PermanentError) else PermanentError
    return permanent(text, service=service, status=status, details=details)


def json_body(service: str, response: httpx.Response, *, what: str = "") -> object:
    """A 2xx body as JSON (None when empty); a body that is not JSON is ServiceUnavailableError."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        prefix = f"{what}: " if what else ""
        raise ServiceUnavailableError(
            f"{prefix}answered with a body that is not JSON", service=service, status=response.status_code
        ) from None


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """What a service said about a failure: its message, its error type or code, its list of errors."""

    message: str
    kind: str | None = None
    details: tuple[str, ...] = ()
    data: Mapping[str, Any] | None = None


def error_body(response: httpx.Response) -> ErrorBody:
    """The error message in any shape the services send, read defensively (never raises).

    Discourse ``{"errors": [...], "error_type"}``; TEI ``{"error", "error_type"}``; Ollama ``{"error"}``;
    OpenAI, vLLM, llama.cpp ``{"error": {"message", "type", "code"}}``; older vLLM flat ``{"message",
    "type"}``; FastAPI ``{"detail"}``; otherwise the text itself or the status's reason phrase.
    """
    text = response.text
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    body = data if isinstance(data, dict) else None
    message: str | None = None
    kind: str | None = None
    details: tuple[str, ...] = ()
    if body is not None:
        err = body.get("error")
        errors = body.get("errors")
        if isinstance(errors, list) and errors:
            details = tuple(str(e) for e in errors if e is not None)
            message = "; ".join(details)
            kind = _as_text(body.get("error_type"))
        elif isinstance(err, dict):
            message = _as_text(err.get("message")) or _as_text(err)
            kind = _as_text(err.get("type")) or _as_text(err.get("code"))
        elif isinstance(err, str):
            message = err
            kind = _as_text(body.get("error_type")) or _as_text(body.get("type"))
        elif "message" in body:
            message = _as_text(body.get("message"))
            kind = _as_text(body.get("type"))
        elif "detail" in body:
            message = _as_text(body.get("detail"))
    elif data is not None:
        message = _as_text(data)
    if not message:
        message = text.strip() or response.reason_phrase or "no error message"
    return ErrorBody(message[:MAX_MESSAGE], kind, details, body)


def retry_after(
    response: httpx.Response, body: Mapping[str, Any] | None = None, *, now: float | None = None
) -> float | None:
    """Seconds to wait: ``Retry-After`` (seconds or HTTP date), else ``extras.wait_seconds``, else None."""
    seconds = parse_retry_after(response.headers.get("retry-after"), now=now)
    if seconds is not None:
        return seconds
    extras = body.get("extras") if body is not None else None
    if isinstance(extras, Mapping):
        wait = extras.get("wait_seconds")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and math.isfinite(wait):
            return max(0.0, float(wait))
    return None


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
