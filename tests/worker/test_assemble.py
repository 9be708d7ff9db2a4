"""The composition root builds each long-lived object once per process and hands the same one down."""

from __future__ import annotations

import threading

import pytest

from backfill import incremental
from backfill.indexer import BackfillIndexer
from tests.conftest import TEST_DIMENSION, make_settings
from worker.actors import handle_question
from worker.app.assemble import build_answerer, build_runtime
from worker.errors import PermanentError
from worker.pipeline import AnswerPipeline
from worker.runtime import Once

pytestmark = pytest.mark.integration


def test_once_builds_once_whichever_thread_asks_first() -> None:
    built: list[int] = []
    barrier = threading.Barrier(8)

    def build() -> object:
        built.append(1)
        return object()

    once: Once[object] = Once(build)
    seen: list[object] = []

    def ask() -> None:
        barrier.wait()
        seen.append(once())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1
    assert all(s is seen[0] for s in seen)


def test_a_worker_has_one_embedder_for_answering_and_for_index_refreshes(db_url: str, redis_url: str) -> None:
    settings = make_settings(
        db_url,
        redis_url,
        embeddings={
            "provider": "tei",
            "base_url": "http://127.0.0.1:9",
            "model": "test-model",
            "dimension": TEST_DIMENSION,
        },
    )
    runtime = build_runtime(settings, build_answerer)
    try:
        pipeline = runtime.answerer
        assert isinstance(pipeline, AnswerPipeline)
        shared = runtime.embedder()
        assert pipeline.retriever.embedder is shared
        indexer = runtime.indexer()  # what the refresh_post / refresh_topic / backfill_tick actors use
        assert isinstance(indexer, BackfillIndexer)
        assert indexer.runtime.forum.priority == "background"
        with incremental._resolve(indexer.runtime) as deps:
            assert deps.embedder is shared
    finally:
        runtime.close()


def test_a_runtime_without_a_pipeline_refuses_to_answer(db_url: str, redis_url: str) -> None:
    runtime = build_runtime(make_settings(db_url, redis_url))
    try:
        with pytest.raises(PermanentError, match="no answer pipeline"):
            handle_question(runtime, 1, 1, 1, "webhook")
    finally:
        runtime.close()
