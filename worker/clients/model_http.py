"""HTTP failure mapping shared by the model-service clients (embeddings, TEI rerank).

Each client keeps its own ``_request()``; this module only holds the two decisions they share:
what message a service's error body carries (TEI ``{"error", "error_type"}``, Ollama ``{"error"}``,
OpenAI-style nested ``{"error": {message, type, code}}`` or flat ``{"message", "type"}``, FastAPI
``{"detail"}``, or plain text), and which of our error types a status code becomes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import httpx

from worker.errors import (
    AuthError,
    CitebotError,
    IndexMismatchError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    ValidationError,
)

_MAX_MESSAGE = 300


def error_message(response: httpx.Response) -> tuple[str, str | None]:
    """The service's own error message and error type, read defensively from any known body shape."""
    text = response.text
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    message: str | None = None
    kind: str | None = None
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):  # OpenAI / Ollama's OpenAI layer / vLLM / llama.cpp
            message = _as_text(err.get("message"))
            kind = _as_text(err.get("type")) or _as_text(err.get("code"))
        elif isinstance(err, str):  # TEI, Ollama native
            message = err
            kind = _as_text(body.get("error_type"))
        elif "message" in body:  # older vLLM: flat {"object": "error", "message", "type", "code"}
            message = _as_text(body.get("message"))
            kind = _as_text(body.get("type"))
        elif "detail" in body:  # FastAPI-based servers
            message = _as_text(body.get("detail"))
    if message is None:
        message = text.strip() or response.reason_phrase or "no error message"
    return message[:_MAX_MESSAGE], kind


def _as_text(value: object) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds, when it is a number."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def status_error(service: str, response: httpx.Response) -> CitebotError:
    """Our error for a non-2xx answer: 429 rate-limited, 424/5xx unavailable, 4xx permanent."""
    status = response.status_code
    message, kind = error_message(response)
    details = (kind,) if kind else ()
    if status == 429:
        return RateLimitedError(message, service=service, status=status, retry_after=retry_after(response))
    if status == 424 or status >= 500:  # TEI's 424 is a backend (model) failure: may pass
        return ServiceUnavailableError(
            message, service=service, status=status, retry_after=retry_after(response)
        )
    if status in (400, 413, 422):
        return ValidationError(message, service=service, status=status, details=details)
    if status in (401, 403):
        return AuthError(message, service=service, status=status, details=details)
    if status == 404:
        return NotFoundError(message, service=service, status=status, details=details)
    return PermanentError(message, service=service, status=status, details=details)


def transport_error(service: str, exc: httpx.HTTPError) -> ServiceUnavailableError:
    """Our error for a connection failure or timeout (never the request's content in the message)."""
    if isinstance(exc, httpx.TimeoutException):
        return ServiceUnavailableError(f"timed out ({type(exc).__name__})", service=service)
    return ServiceUnavailableError(f"unreachable ({type(exc).__name__}: {exc})", service=service)


def parse_json(service: str, response: httpx.Response) -> object:
    """The body as JSON, or a PermanentError saying the payload is not what the service should send."""
    try:
        return response.json()
    except ValueError:
        raise PermanentError(
            "answered with a body that is not JSON", service=service, status=response.status_code
        ) from None


def check_vector(service: str, vector: object, dimension: int) -> list[float]:
    """A vector of ``dimension`` finite floats, L2-normalised; anything else fails loudly."""
    if not isinstance(vector, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in vector
    ):
        raise PermanentError("returned something that is not a vector of numbers", service=service)
    if len(vector) != dimension:
        raise IndexMismatchError(
            f"returned a {len(vector)}-d vector but the index is {dimension}-d; "
            "the service runs another model than the one configured",
            service=service,
        )
    return normalise([float(x) for x in vector], service)


def normalise(vector: Sequence[float], service: str) -> list[float]:
    """The vector scaled to unit length; a zero or non-finite vector is a bad payload."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise PermanentError("returned a zero or non-finite vector", service=service)
    return [x / norm for x in vector]
