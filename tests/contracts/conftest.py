"""Every implementation of each protocol the pipeline depends on, for the contract suites.

Each fixture yields the in-memory fake of ``worker.testing`` (the embedder also the local MiniLM)
and the real HTTP client talking to the TEI + OpenAI double
(``worker.testing.server.ModelDouble``: the e2e tests' and the soak's) over loopback HTTP, so the fake
and the client are held to one contract. The forum's suite (``test_forum.py``) builds its own pair.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from eval.stack.launcher import AppThread
from worker.clients.embeddings import TeiEmbedder, build_embedder
from worker.clients.llm import OpenAIChatClient
from worker.clients.tei import TeiReranker
from worker.protocols import ChatModel, Embedder, Reranker
from worker.settings import EmbeddingsSettings, LlmSettings, RerankerSettings, Settings
from worker.testing.chat import FakeChatModel
from worker.testing.models import FakeEmbedder, FakeReranker
from worker.testing.server import ModelDouble

MODEL = "contract-model"
DIMENSION = 8


@pytest.fixture(scope="module")
def double_url() -> Iterator[str]:
    """The TEI + OpenAI double, served by uvicorn on a free loopback port for this module."""
    with AppThread(
        ModelDouble(model=MODEL, dimension=DIMENSION).app, name="models", lifespan="off"
    ) as server:
        yield server.url


@pytest.fixture
def double() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as client:
        yield client


@pytest.fixture(scope="session")
def local_embedder() -> Embedder:
    """The shipped MiniLM, loaded once for the session."""
    local = EmbeddingsSettings(
        provider="local", model="sentence-transformers/all-MiniLM-L6-v2", dimension=384
    )  # type: ignore[call-arg]
    return build_embedder(Settings(embeddings=local), None)  # type: ignore[call-arg]


@pytest.fixture(params=["fake", "fake-fixed", "local", "tei-client"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "fake":
        return FakeEmbedder(model=MODEL, dimension=DIMENSION)
    if request.param == "fake-fixed":
        return FakeEmbedder(model=MODEL, dimension=DIMENSION, fixed=True)
    if request.param == "local":
        local: Embedder = request.getfixturevalue("local_embedder")
        return local
    http: httpx.Client = request.getfixturevalue("double")
    base = request.getfixturevalue("double_url")
    settings = EmbeddingsSettings(provider="tei", base_url=base, model=MODEL, dimension=DIMENSION)  # type: ignore[call-arg]
    return TeiEmbedder(http, settings)


@pytest.fixture(params=["fake", "tei-client"])
def reranker(request: pytest.FixtureRequest) -> Reranker:
    if request.param == "fake":
        return FakeReranker(name=MODEL)
    http: httpx.Client = request.getfixturevalue("double")
    base = request.getfixturevalue("double_url")
    return TeiReranker(http, RerankerSettings(base_url=base))  # type: ignore[call-arg]


@pytest.fixture(params=["fake", "openai-client"])
def chat(request: pytest.FixtureRequest) -> ChatModel:
    if request.param == "fake":
        return FakeChatModel(default="See the first post [[1]].", name=MODEL)
    http: httpx.Client = request.getfixturevalue("double")
    base = request.getfixturevalue("double_url")
    return OpenAIChatClient(http, LlmSettings(base_url=base, model=MODEL))  # type: ignore[call-arg]
