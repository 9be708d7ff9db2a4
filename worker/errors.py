"""The error tree of citebot.

::

    CitebotError                      base of everything we raise on purpose
    ├── ConfigError                   a setting is missing or invalid (exit code 2 at the CLI)
    ├── TransientError                worth retrying: timeouts, 429, 5xx, a service restarting
    │   ├── RateLimitedError          429; ``retry_after`` carries the server's wait in seconds
    │   ├── ServiceUnavailableError   connection refused, timeout, 5xx, 503 "unhealthy"
    │   └── HeldError                 a question cannot be decided yet (flags unreadable): held, retried
    └── PermanentError                retrying cannot help: 4xx, bad payloads, mismatched models
        ├── ValidationError           the service rejected our input (400, 413, 422)
        ├── NotFoundError             404
        ├── AuthError                 401, 403
        └── IndexMismatchError        the post index was built with another model or dimension

A gate refusal, an abstention or a dropped citation is a *return value*, never an exception.
Every client maps its transport and status-code failures onto this tree in one place
(its ``_request`` helper), so the pipeline and the actors only ever see these types.
"""

from __future__ import annotations


class CitebotError(Exception):
    """Base class of the errors citebot raises on purpose."""

    def __init__(self, message: str, *, service: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.service = service
        self.status = status

    def __str__(self) -> str:
        prefix = f"{self.service}: " if self.service else ""
        suffix = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{prefix}{self.message}{suffix}"


class ConfigError(CitebotError):
    """A setting is missing or invalid. Raised at start, before any work is done."""


class TransientError(CitebotError):
    """A failure that may go away by itself; the actor retries it with backoff."""

    def __init__(
        self,
        message: str,
        *,
        service: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, service=service, status=status)
        self.retry_after = retry_after


class RateLimitedError(TransientError):
    """The service answered 429; ``retry_after`` is its requested wait, when it gave one."""


class ServiceUnavailableError(TransientError):
    """The service could not be reached, timed out, or answered 5xx."""


class HeldError(TransientError):
    """The question cannot be decided yet: the flags have never been read (settings unreadable, the forum
    answering 5xx). Its row is ``held``; the actor retries with backoff and, when the retries run out,
    the row stays ``held`` for the poller to send again: never given up, never answered on a guess."""


class PermanentError(CitebotError):
    """A failure that retrying cannot fix; the actor records it and stops."""

    def __init__(
        self,
        message: str,
        *,
        service: str | None = None,
        status: int | None = None,
        details: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, service=service, status=status)
        self.details = details


class ValidationError(PermanentError):
    """The service rejected our input (400, 413, 422); ``details`` holds its messages."""


class NotFoundError(PermanentError):
    """The resource does not exist (404) or is not visible to us."""


class AuthError(PermanentError):
    """Our credentials were refused (401, 403)."""


class IndexMismatchError(PermanentError):
    """The post index was built with another embedding model or dimension than the one configured."""
