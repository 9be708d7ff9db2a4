"""``TeiReranker``: TEI's ``POST /rerank`` cross-encoder behind the ``Reranker`` protocol.

Every call asks for ``raw_scores: true`` (logits: the zone thresholds −4 and 0 are logits, and TEI's
ONNX/Candle logits equal PyTorch's) and ``truncate: true`` (a long post must not fail the request).
TEI answers ``[{index, score}]`` sorted by score; we map it back to input order. The server's
``max_client_batch_size`` (``/info``, default 32) bounds each request; longer lists are split, and a
server that refuses a batch as too large tells us its limit, which we adopt. One deadline
(``timeout_s``, ~2 s) covers all the batches of one ``rerank()``: the caller falls back to the fused
order when it expires.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Sequence

import httpx

from worker.clients import http as outbound
from worker.errors import CitebotError, ConfigError, PermanentError, ServiceUnavailableError, ValidationError
from worker.protocols import Reranker
from worker.settings import RerankerSettings

log = logging.getLogger(__name__)

SERVICE = "tei-rerank"
_BATCH_LIMIT = re.compile(r"maximum allowed batch size (\d+)")


class TeiReranker(Reranker):
    """Scores (question, text) pairs with the cross-encoder a TEI server runs; logits in input order."""

    def __init__(self, http: httpx.Client, settings: RerankerSettings) -> None:
        if not settings.base_url:
            raise ConfigError("the TEI reranker needs CITEBOT_RERANKER__BASE_URL")
        self._http = http
        self._settings = settings
        self._base_url = settings.base_url.rstrip("/")
        self._batch_size = settings.batch_size
        self._info_read = False
        self.served_model: str | None = None
        self.reranker_id: str | None = None  # the scorer's id by /info: its zone thresholds' key

    @property
    def name(self) -> str:
        return f"tei:{self.served_model or self._base_url}"

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def info(self, *, timeout: float | None = None) -> dict[str, object]:
        """TEI's ``GET /info``; adopts its ``max_client_batch_size`` and records its ``model_id``."""
        body = self._request("GET", "/info", None, timeout or self._settings.timeout_s)
        if not isinstance(body, dict):
            raise PermanentError("/info is not an object", service=SERVICE)
        limit = body.get("max_client_batch_size")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self._batch_size = min(self._settings.batch_size, limit)
        if isinstance(body.get("model_id"), str):
            self.served_model = str(body["model_id"])
        self.reranker_id = reranker_id(body)
        self._info_read = True
        return body

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """One raw logit per text, in input order. Raises TransientError / PermanentError."""
        if not texts:
            return []
        deadline = time.monotonic() + self._settings.timeout_s
        if not self._info_read:
            self._read_limits(deadline)
        scores: list[float | None] = [None] * len(texts)
        start = 0
        while start < len(texts):
            batch = list(texts[start : start + self._batch_size])
            payload = {"query": query, "texts": batch, "raw_scores": True, "truncate": True}
            try:
                body = self._request("POST", "/rerank", payload, _remaining(deadline))
            except ValidationError as exc:
                limit = _BATCH_LIMIT.search(exc.message)
                if limit and 0 < int(limit.group(1)) < len(batch):
                    self._batch_size = int(limit.group(1))
                    log.info("TEI batch limit is %d; splitting rerank calls", self._batch_size)
                    continue
                raise
            for index, score in _ranks(body, len(batch)):
                scores[start + index] = score
            start += len(batch)
        return [s if s is not None else math.nan for s in scores]

    def _read_limits(self, deadline: float) -> None:
        # /info is optional (a proxy may hide it): without it, settings.batch_size stands.
        try:
            self.info(timeout=_remaining(deadline))
        except CitebotError as exc:
            log.debug("TEI /info unavailable (%s); using batch size %d", exc, self._batch_size)
            self._info_read = True

    def _request(self, method: str, path: str, payload: object | None, timeout: float) -> object:
        """One call; transport failures and non-2xx answers become our error types."""
        response = outbound.send(
            self._http, SERVICE, method, self._base_url + path, json=payload, timeout=timeout
        )
        outbound.check(SERVICE, response)
        return outbound.json_body(SERVICE, response)


def reranker_id(info: dict[str, object]) -> str | None:
    """Which scorer answers ``/rerank``, from ``/info``: TEI's ``model_id`` (a cross-encoder); the local
    model server names its scorer apart (``reranker_model_id``, and ``scorer`` when it is not a
    cross-encoder: ``calibrated-bi-encoder:<embedding model>``)."""
    rid = info.get("reranker_model_id") or info.get("model_id")
    if not isinstance(rid, str) or not rid:
        return None
    scorer = info.get("scorer")
    if isinstance(scorer, str) and scorer and scorer != "cross-encoder":
        return f"{scorer}:{rid}"
    return rid


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ServiceUnavailableError("timed out (rerank deadline spent)", service=SERVICE)
    return left


def _ranks(body: object, n: int) -> list[tuple[int, float]]:
    """TEI's ``[{index, score}, …]``, checked: every index 0..n-1 exactly once, finite scores."""
    if not isinstance(body, list):
        raise PermanentError("answer is not a list of ranks", service=SERVICE)
    out: list[tuple[int, float]] = []
    for item in body:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("score") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(score, int | float):
            raise PermanentError("a rank lacks an integer `index` or a numeric `score`", service=SERVICE)
        if not math.isfinite(score):
            raise PermanentError("a score is not finite", service=SERVICE)
        out.append((index, float(score)))
    if sorted(i for i, _ in out) != list(range(n)):
        raise PermanentError(f"ranks do not cover the {n} texts sent exactly once", service=SERVICE)
    return out
