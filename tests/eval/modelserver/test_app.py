"""The local model server speaks TEI's contract: routes, bodies, status codes, error bodies (real model)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from starlette.testclient import TestClient

from eval.stack.modelserver.app import Limits, create_app
from eval.stack.modelserver.models import BiEncoderScorer, EmbeddingModel, sigmoid
from tests.eval.modelserver.conftest import TEST_CALIBRATION

QUESTION = "How do I enable shadows for a directional light?"
RELEVANT = "Shadows\n\nSet light->SetCastShadows(true) on the directional light and tune the shadow cascade."
IRRELEVANT = "Audio volume\n\nUse SoundSource::SetGain to change how loud a sound plays."


@pytest.fixture(scope="module")
def client(embedding_model: EmbeddingModel, scorer: BiEncoderScorer) -> TestClient:
    return TestClient(create_app(embedding_model, scorer))


def norm(v: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def test_health(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.content == b""


def test_info_says_what_serves(client: TestClient) -> None:
    info = client.get("/info").json()
    assert info["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert info["model_type"]["embedding"] == {"pooling": "mean"}
    assert "reranker" in info["model_type"]
    assert info["max_client_batch_size"] == 32
    assert info["max_input_length"] == 256
    assert info["scorer"] == "calibrated-bi-encoder"
    assert info["calibration"] == {"a": 20.0, "b": -8.0, "model_id": "sentence-transformers/all-MiniLM-L6-v2"}
    assert info["dimension"] == 384


def test_embed_one_string_and_a_list(client: TestClient, embedding_model: EmbeddingModel) -> None:
    one = client.post("/embed", json={"inputs": "hello world"})
    assert one.status_code == 200
    vectors = one.json()
    assert len(vectors) == 1
    assert len(vectors[0]) == 384
    assert norm(vectors[0]) == pytest.approx(1.0, abs=1e-5)
    many = client.post("/embed", json={"inputs": ["hello world", QUESTION], "truncate": True}).json()
    assert many[0] == pytest.approx(vectors[0], abs=1e-5)
    direct = embedding_model.embed([QUESTION])[0]
    assert np.asarray(many[1]) == pytest.approx(direct, abs=1e-5)


def test_embed_without_normalize_keeps_the_direction(client: TestClient) -> None:
    # all-MiniLM-L6-v2's pipeline ends with a Normalize layer, so its raw output is a unit vector too.
    raw = client.post("/embed", json={"inputs": [QUESTION], "normalize": False}).json()[0]
    unit = client.post("/embed", json={"inputs": [QUESTION]}).json()[0]
    assert [x / norm(raw) for x in raw] == pytest.approx(unit, abs=1e-5)


def test_embed_errors_are_teis(client: TestClient) -> None:
    empty = client.post("/embed", json={"inputs": []})
    assert (empty.status_code, empty.json()) == (
        400,
        {"error": "`inputs` cannot be empty", "error_type": "Empty"},
    )
    big = client.post("/embed", json={"inputs": ["a"] * 33})
    assert big.status_code == 422
    assert big.json() == {
        "error": "batch size 33 > maximum allowed batch size 32",
        "error_type": "Validation",
    }
    long = client.post("/embed", json={"inputs": ["word " * 400], "truncate": False})
    assert long.status_code == 422
    assert long.json()["error_type"] == "Validation"
    assert long.json()["error"].startswith("Input validation error: `inputs` must have less than 256 tokens")
    assert client.post("/embed", json={"inputs": ["word " * 400], "truncate": True}).status_code == 200


@pytest.mark.parametrize(
    ("content", "status", "text"),
    [
        (b"{not json", 400, "Failed to parse the request body as JSON"),
        (b'{"truncate": true}', 422, "missing field `inputs`"),
        (b'{"inputs": [1, 2]}', 422, "Failed to deserialize"),
        (b'{"inputs": "a", "normalize": "yes"}', 422, "`normalize`"),
        (b"[]", 422, "Failed to deserialize"),
    ],
)
def test_malformed_bodies_get_axum_style_plain_text(
    client: TestClient, content: bytes, status: int, text: str
) -> None:
    response = client.post("/embed", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/plain")
    assert text in response.text


def test_oversized_body_is_a_plain_text_413(embedding_model: EmbeddingModel, scorer: BiEncoderScorer) -> None:
    small = TestClient(create_app(embedding_model, scorer, Limits(payload_limit=1000)))
    response = small.post("/embed", json={"inputs": ["x" * 2000]})
    assert response.status_code == 413
    assert response.text == "Failed to buffer the request body: length limit exceeded"


def test_rerank_sorted_best_first_with_raw_logits(client: TestClient, scorer: BiEncoderScorer) -> None:
    texts = [IRRELEVANT, RELEVANT]
    response = client.post(
        "/rerank", json={"query": QUESTION, "texts": texts, "raw_scores": True, "truncate": True}
    )
    assert response.status_code == 200
    ranks = response.json()
    assert [r["index"] for r in ranks] == [1, 0]  # the relevant text wins
    assert ranks[0]["score"] > ranks[1]["score"]
    cosines = scorer.cosines(QUESTION, texts)
    expected = {i: TEST_CALIBRATION.logit(float(c)) for i, c in enumerate(cosines)}
    assert {r["index"]: r["score"] for r in ranks} == pytest.approx(expected, abs=1e-4)
    assert all("text" not in r for r in ranks)


def test_rerank_without_raw_scores_applies_the_sigmoid(client: TestClient) -> None:
    body = {"query": QUESTION, "texts": [IRRELEVANT, RELEVANT], "return_text": True}
    probs = client.post("/rerank", json=body).json()
    logits = client.post("/rerank", json={**body, "raw_scores": True}).json()
    assert [r["index"] for r in probs] == [r["index"] for r in logits]
    assert [r["score"] for r in probs] == pytest.approx([sigmoid(r["score"]) for r in logits], abs=1e-6)
    assert all(0.0 < r["score"] < 1.0 for r in probs)
    assert [r["text"] for r in probs] == [RELEVANT, IRRELEVANT]


def test_rerank_errors_are_teis(client: TestClient) -> None:
    empty = client.post("/rerank", json={"query": "q", "texts": []})
    assert (empty.status_code, empty.json()) == (
        400,
        {"error": "`texts` cannot be empty", "error_type": "Empty"},
    )
    big = client.post("/rerank", json={"query": "q", "texts": ["t"] * 40})
    assert (big.status_code, big.json()["error_type"]) == (422, "Validation")
    missing = client.post("/rerank", json={"texts": ["t"]})
    assert missing.status_code == 422
    assert "missing field `query`" in missing.text


def test_overloaded_is_429(embedding_model: EmbeddingModel, scorer: BiEncoderScorer) -> None:
    tight = TestClient(create_app(embedding_model, scorer, Limits(max_concurrent_requests=2)))
    response = tight.post("/rerank", json={"query": "q", "texts": ["a", "b", "c"]})
    assert (response.status_code, response.json()) == (
        429,
        {"error": "Model is overloaded", "error_type": "Overloaded"},
    )
    assert tight.post("/rerank", json={"query": "q", "texts": ["a", "b"]}).status_code == 200  # slots freed


class BrokenScorer:
    kind = "cross-encoder"
    model_id = "broken"
    max_input_length = 512

    def logits(self, query: str, texts: Sequence[str]) -> list[float]:
        raise RuntimeError("CUDA out of memory")

    def count_tokens(self, query: str, text: str) -> int:
        return 1


def test_a_model_failure_is_a_424_backend_error(embedding_model: EmbeddingModel) -> None:
    broken = TestClient(create_app(embedding_model, BrokenScorer()))
    response = broken.post("/rerank", json={"query": "q", "texts": ["a"]})
    assert response.status_code == 424
    assert response.json() == {"error": "Backend error: RuntimeError", "error_type": "Backend"}
    assert broken.get("/info").json()["scorer"] == "cross-encoder"
    assert broken.get("/info").json()["calibration"] is None


def test_cached_text_vectors_give_the_same_cosines(embedding_model: EmbeddingModel) -> None:
    scorer = BiEncoderScorer(embedding_model, TEST_CALIBRATION, cache_size=2)
    texts = [RELEVANT, IRRELEVANT, "third text", RELEVANT]
    first = scorer.cosines(QUESTION, texts)
    again = scorer.cosines(QUESTION, texts)  # partly from the cache (two entries kept)
    vectors = embedding_model.embed([QUESTION, *texts])
    assert first == pytest.approx(vectors[1:] @ vectors[0], abs=1e-5)
    assert again == pytest.approx(first, abs=1e-6)
    assert first[0] == pytest.approx(first[3], abs=1e-6)
