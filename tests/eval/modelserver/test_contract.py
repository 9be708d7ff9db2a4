"""Contract: our TEI clients against the local model server over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from eval.stack.modelserver.models import BiEncoderScorer, EmbeddingModel
from eval.stack.modelserver.server import ModelServerThread
from worker.clients.embeddings import TeiEmbedder
from worker.clients.tei import TeiReranker
from worker.errors import ServiceUnavailableError
from worker.retrieval.rerank import rerank_text
from worker.settings import EmbeddingsSettings, RerankerSettings

QUESTION = "My physics objects fall through the terrain, how do I add a collision shape?"
RELEVANT = rerank_text(
    "Objects falling through terrain",
    "Add a CollisionShape component with SetTerrain() next to the RigidBody on the terrain node; "
    "without a collision shape the physics world has nothing to collide with.",
)
IRRELEVANT = rerank_text(
    "Changing the window title",
    "Call graphics->SetWindowTitle() after the engine is initialised to rename the application window.",
)


@pytest.fixture(scope="module")
def server(embedding_model: EmbeddingModel, scorer: BiEncoderScorer) -> Iterator[str]:
    with ModelServerThread(embedding_model, scorer) as running:
        yield running.url


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def test_reranker_ranks_the_relevant_post_first(server: str, http: httpx.Client) -> None:
    reranker = TeiReranker(http, RerankerSettings(base_url=server, timeout_s=30))  # type: ignore[call-arg]
    irrelevant, relevant = reranker.rerank(QUESTION, [IRRELEVANT, RELEVANT])
    assert relevant > irrelevant
    assert reranker.name == "tei:sentence-transformers/all-MiniLM-L6-v2"


def test_reranker_splits_a_long_list_by_the_servers_limit(server: str, http: httpx.Client) -> None:
    reranker = TeiReranker(http, RerankerSettings(base_url=server, timeout_s=60, batch_size=100))  # type: ignore[call-arg]
    texts = [IRRELEVANT] * 39 + [RELEVANT]
    scores = reranker.rerank(QUESTION, texts)
    assert reranker.batch_size == 32  # from /info
    assert len(scores) == 40
    assert int(np.argmax(scores)) == 39
    assert scores[0] == pytest.approx(scores[38], abs=1e-4)


def test_embedder_matches_the_model_and_learns_the_batch_limit(
    server: str, http: httpx.Client, embedding_model: EmbeddingModel
) -> None:
    settings = EmbeddingsSettings(  # type: ignore[call-arg]
        provider="tei", base_url=server, model="sentence-transformers/all-MiniLM-L6-v2", dimension=384,
        batch_size=64, timeout_s=60,
    )  # fmt: skip
    embedder = TeiEmbedder(http, settings)
    texts = [f"post number {i} about shadows" for i in range(40)]
    vectors = embedder.embed(texts)
    assert embedder.batch_size == 32  # the server refused 40 with TEI's 422 and named its limit
    assert len(vectors) == 40
    direct = embedding_model.embed(texts[:2])
    assert np.asarray(vectors[:2]) == pytest.approx(direct, abs=1e-5)
    q = np.asarray(embedder.embed([QUESTION], kind="query")[0])
    rel, irr = np.asarray(embedder.embed([RELEVANT, IRRELEVANT]))
    assert q @ rel > q @ irr


def test_a_stopped_server_is_unavailable(embedding_model: EmbeddingModel, scorer: BiEncoderScorer) -> None:
    with ModelServerThread(embedding_model, scorer) as running:
        url = running.url
    with httpx.Client() as http:
        reranker = TeiReranker(http, RerankerSettings(base_url=url, timeout_s=2))  # type: ignore[call-arg]
        with pytest.raises(ServiceUnavailableError):
            reranker.rerank("q", ["a"])
