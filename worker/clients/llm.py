"""``OpenAIChatClient``: ``/v1/chat/completions`` on Ollama, vLLM, llama.cpp or a hosted API.

Retry policy (``worker.retry``, inside one call, before the actor's own retries): 429, 5xx, timeouts,
connection errors and empty completions are retried up to ``settings.max_retries`` times. The wait is
the server's ``Retry-After`` when it sent one, else ``backoff_s * 2**attempt`` capped at ``max_wait_s``,
without jitter; a ``Retry-After`` longer than the cap is not slept on: the ``RateLimitedError``
propagates at once so the actor reschedules the message instead of holding a worker thread. After the
last try the transient error propagates. Everything else (400/413/422 → ValidationError, 401/403 →
AuthError, 404 → NotFoundError, a malformed body, an empty completion cut by ``max_tokens``) is a
PermanentError. A completion cut by ``max_tokens`` loses its unfinished last sentence, so no half
sentence is posted.

Statuses, transport failures, ``Retry-After`` and error bodies (nested ``{"error": {"message", "type",
"code"}}``, flat ``{"object": "error", ...}``, ``{"error": "text"}``, plain text) are mapped by
``worker.clients.http``, the one outbound call path. Server messages can quote the prompt, so they are
kept out of the errors' text (``redact``) and logged at DEBUG only; the API key is never logged.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from prometheus_client import Counter

from worker.clients import http as outbound
from worker.domain import Completion, Usage
from worker.errors import (
    ConfigError,
    PermanentError,
    ServiceUnavailableError,
    TransientError,
    ValidationError,
)
from worker.retry import RetryPolicy, call_with_retry
from worker.settings import LlmSettings

log = logging.getLogger(__name__)

SERVICE = "llm"
LLM_REQUESTS = Counter("citebot_llm_requests", "HTTP requests to the LLM, by outcome.", ["outcome"])
LLM_TOKENS = Counter("citebot_llm_tokens", "Tokens the LLM reported, by kind.", ["kind"])
_SENTENCE_END = re.compile(r"[.!?…:](?:\s*\[\[[\d,\s]+\]\])*(?=\s|$)|\n")
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


def chat_completions_url(base_url: str) -> str:
    """``{base}/v1/chat/completions``, whether or not ``base_url`` already ends with ``/v1``."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if not base.endswith("/v1"):
        base += "/v1"
    return base + "/chat/completions"


class OpenAIChatClient:
    """A ``ChatModel`` over an OpenAI-compatible server (see the module docstring for the retry policy)."""

    def __init__(
        self,
        http: httpx.Client,
        settings: LlmSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        backoff_s: float = 1.0,
        max_wait_s: float = 20.0,
    ) -> None:
        if not settings.base_url:
            raise ConfigError("CITEBOT_LLM__BASE_URL is not set (unset means the offline generator)")
        self._http = http
        self._settings = settings
        self._sleep = sleep
        # Exact waits (no jitter): one call's few retries, before the actor's own (``worker.retry``).
        self._retry = RetryPolicy(
            attempts=settings.max_retries + 1,
            base_s=backoff_s,
            cap_s=max_wait_s,
            jitter=False,
            longest_wait_s=max_wait_s,
        )
        self._url = chat_completions_url(settings.base_url)

    @property
    def name(self) -> str:
        return self._settings.model

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        """One completion; retries transient failures, then lets the last one propagate."""
        payload = {
            "model": self._settings.model,
            "messages": list(messages),
            self._settings.token_param(): self._settings.max_tokens,
            "temperature": self._settings.temperature,
            "stream": False,
        }

        def logged(exc: TransientError, retry: int, wait: float) -> float:
            log.warning(
                "LLM call failed (%s), retry %d/%d in %.1f s",
                type(exc).__name__,
                retry,
                self._settings.max_retries,
                wait,
                extra={"stage": "generate", "status": exc.status},
            )
            return wait

        try:
            return call_with_retry(
                lambda: self._parse(self._request(payload)), self._retry, sleep=self._sleep, on_retry=logged
            )
        except TransientError:
            LLM_REQUESTS.labels(outcome="gave_up").inc()
            raise

    def _request(self, payload: dict[str, object]) -> Any:
        headers = {"Accept": "application/json"}
        key = self._settings.api_key.get_secret_value()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        response = outbound.send(
            self._http,
            SERVICE,
            "POST",
            self._url,
            json=payload,
            headers=headers,
            timeout=self._settings.timeout_s,
            outcome=lambda outcome: LLM_REQUESTS.labels(outcome=outcome).inc(),
        )
        if not response.is_success:
            body = outbound.error_body(response)
            log.debug(
                "LLM error body: HTTP %d type=%s message=%s", response.status_code, body.kind, body.message
            )
        # Server messages can quote the prompt: they stay in ``details``, out of the error's text.
        outbound.check(SERVICE, response, redact=True)
        return outbound.json_body(SERVICE, response)

    def _parse(self, body: Any) -> Completion:
        if not isinstance(body, Mapping):
            raise PermanentError("response is not a JSON object", service=SERVICE)
        if "error" in body or body.get("object") == "error":
            # Some servers answer 200 with an error body (e.g. a failure in the middle of generation).
            code = _error_code(body)
            if code == 429 or (code is not None and code >= 500) or code is None:
                raise ServiceUnavailableError("error in a 200 response", service=SERVICE, status=code)
            raise PermanentError("error in a 200 response", service=SERVICE, status=code)
        choices = body.get("choices")
        if not isinstance(choices, list):
            raise PermanentError("response has no choices", service=SERVICE)
        if not choices:
            raise ServiceUnavailableError("empty choices", service=SERVICE)
        first = choices[0] if isinstance(choices[0], Mapping) else {}
        message = first.get("message")
        content = message.get("content") if isinstance(message, Mapping) else None
        if content is not None and not isinstance(content, str):
            raise PermanentError("message content is not text", service=SERVICE)
        text = _THINK.sub("", content or "").strip()
        if not text:
            if first.get("finish_reason") == "length":
                raise ValidationError("empty completion cut by max_tokens", service=SERVICE)
            if first.get("finish_reason") == "content_filter":
                raise PermanentError("completion blocked by the provider's filter", service=SERVICE)
            raise ServiceUnavailableError("empty completion", service=SERVICE)
        if first.get("finish_reason") == "length":
            text = cut_to_last_sentence(text)
            LLM_REQUESTS.labels(outcome="cut").inc()
            log.info("LLM answer cut by max_tokens; kept %d characters of whole sentences", len(text))
            if not text:
                raise ValidationError("completion cut by max_tokens before one sentence", service=SERVICE)
        usage = _usage(body.get("usage"))
        LLM_TOKENS.labels(kind="prompt").inc(usage.prompt_tokens)
        LLM_TOKENS.labels(kind="completion").inc(usage.completion_tokens)
        model = body.get("model")
        return Completion(
            text=text, model=model if isinstance(model, str) and model else self.name, usage=usage
        )


def cut_to_last_sentence(text: str) -> str:
    """Drop an unfinished last sentence (a completion cut by ``max_tokens``): never post half a thought."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    kept = text[: ends[-1]].rstrip() if ends else ""
    if kept.count("```") % 2:  # an unclosed code block would swallow what the pipeline appends
        kept = kept[: kept.rfind("```")].rstrip()
    return kept


def _error_code(body: Mapping[str, Any]) -> int | None:
    err = body.get("error")
    code = err.get("code") if isinstance(err, Mapping) else body.get("code")
    if isinstance(code, int):
        return code
    if isinstance(code, str) and code.isdigit():
        return int(code)
    return None


def _usage(raw: object) -> Usage:
    if not isinstance(raw, Mapping):
        return Usage()

    def num(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    return Usage(prompt_tokens=num("prompt_tokens"), completion_tokens=num("completion_tokens"))
