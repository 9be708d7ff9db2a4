"""Embedding batches: transient errors retried (honouring retry_after), permanent ones isolated."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest

from backfill.embedding import embed_batch, embed_with_retry
from backfill.progress import Progress
from worker.errors import RateLimitedError, ServiceUnavailableError, ValidationError
from worker.retry import RetryPolicy
from worker.testing.models import FakeEmbedder


class Flaky(FakeEmbedder):
    """Fails with the queued errors first; rejects any text containing 'BAD' permanently."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__(model="test-model")
        self.errors = errors

    def embed_array(self, texts: Sequence[str]):  # type: ignore[no-untyped-def]
        if self.errors:
            raise self.errors.pop(0)
        if any("BAD" in t for t in texts):
            raise ValidationError("input too long", service="tei", status=413)
        return super().embed_array(texts)


def test_transient_errors_are_retried_with_the_servers_wait() -> None:
    sleeps: list[float] = []
    flaky = Flaky([RateLimitedError("busy", retry_after=7.0), ServiceUnavailableError("down")])
    vectors = embed_with_retry(
        flaky, ["a", "b"], policy=RetryPolicy(attempts=3, base_s=0.5), sleep=sleeps.append
    )
    assert vectors.shape == (2, 8)
    assert sleeps[0] == 7.0
    assert 0.25 <= sleeps[1] <= 1.0  # 0.5 * 2**1 with jitter in [0.5, 1)


def test_transient_errors_propagate_when_retries_run_out() -> None:
    flaky = Flaky([ServiceUnavailableError("down")] * 3)
    with pytest.raises(ServiceUnavailableError):
        embed_with_retry(flaky, ["a"], policy=RetryPolicy(attempts=3), sleep=lambda s: None)


def test_a_permanent_error_fails_only_the_bad_text() -> None:
    result = embed_batch(Flaky([]), ["good one", "BAD one", "good two"], sleep=lambda s: None)
    assert result.ok == (0, 2)
    assert result.failed == 1
    assert result.vectors.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(result.vectors, axis=1), 1.0, rtol=1e-5)


def test_progress_logs_rate_and_eta_without_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="backfill.progress")
    with Progress(200, interactive=False, every_s=0.0, first_s=0.0, label="file:x") as progress:
        progress.advance(50, embedded=40)
    assert "file:x 50/200 posts (25.0%)" in caplog.text
    assert "ETA" in caplog.text
