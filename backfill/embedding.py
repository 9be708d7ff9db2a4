"""Embedding batches for the backfill: retries on transient errors, isolation of permanent ones.

A ``TransientError`` (timeout, 429, 5xx) is retried in place (``worker.retry``: the server's
``retry_after``, else exponential backoff); when the retries run out it propagates and the run stops
with its checkpoint (the service is down: continuing would only mark every post failed). A
``PermanentError`` on a batch is retried text by text, so one bad text (say, a 413) fails alone and is
counted, not the batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from worker.errors import PermanentError, TransientError
from worker.protocols import Embedder
from worker.retry import RetryPolicy, call_with_retry

log = logging.getLogger(__name__)

DEFAULT_RETRY = RetryPolicy()  # 6 tries, 1 s doubling to 60 s, with jitter


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """Vectors for the texts that succeeded (``ok`` indexes into the input), and how many failed."""

    ok: tuple[int, ...]
    vectors: NDArray[np.float32]
    failed: int


def _as_array(embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
    # Embedders that already hold numpy arrays (local models, the fake embedder) skip the list round trip.
    as_array = getattr(embedder, "embed_array", None)
    raw = as_array(texts) if callable(as_array) else embedder.embed(texts, kind="passage")
    arr = np.asarray(raw, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != len(texts) or arr.shape[1] != embedder.dimension:
        raise PermanentError(
            f"embedder returned shape {arr.shape} for {len(texts)} texts of dimension {embedder.dimension}",
            service="embeddings",
        )
    return arr


def embed_with_retry(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> NDArray[np.float32]:
    """Vectors for ``texts``; retries transient failures, re-raises the last one when out of attempts."""

    def logged(exc: TransientError, retry: int, wait: float) -> float:
        log.warning("embedding failed (%s); retry %d in %.1f s", exc, retry, wait)
        return wait

    return call_with_retry(lambda: _as_array(embedder, texts), policy, sleep=sleep, on_retry=logged)


def embed_batch(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    policy: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> EmbedResult:
    """Embed one batch; on a permanent error, embed its texts one by one and count the ones that fail."""
    try:
        vectors = embed_with_retry(embedder, texts, policy=policy, sleep=sleep)
        return EmbedResult(tuple(range(len(texts))), vectors, 0)
    except PermanentError as exc:
        if len(texts) == 1:
            log.warning("embedding one text failed permanently: %s", exc)
            return EmbedResult((), np.zeros((0, embedder.dimension), np.float32), 1)
        log.warning("a batch of %d failed permanently (%s); isolating the bad texts", len(texts), exc)
    ok: list[int] = []
    rows: list[NDArray[np.float32]] = []
    failed = 0
    for i, text in enumerate(texts):
        one = embed_batch(embedder, [text], policy=policy, sleep=sleep)
        if one.failed:
            failed += 1
        else:
            ok.append(i)
            rows.append(one.vectors[0])
    vectors = np.stack(rows) if rows else np.zeros((0, embedder.dimension), np.float32)
    return EmbedResult(tuple(ok), vectors, failed)
