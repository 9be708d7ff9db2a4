"""The calibration: the logistic fit, the text the reranker reads, and the committed figures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from eval.stack.modelserver.calibrate import fit_logistic
from eval.stack.modelserver.models import (
    CALIBRATION_PATH,
    SHIPPED_MODEL_ID,
    BiEncoderScorer,
    Calibration,
    EmbeddingModel,
)


def test_fit_recovers_known_parameters() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(-0.2, 0.9, 20000)
    y = (rng.uniform(size=x.size) < 1 / (1 + np.exp(-(12.0 * x - 5.0)))).astype(float)
    a, b = fit_logistic(x, y, np.ones_like(x))
    assert a == pytest.approx(12.0, rel=0.1)
    assert b == pytest.approx(-5.0, rel=0.1)


def test_weights_shift_only_the_intercept_by_the_log_prior_ratio() -> None:
    rng = np.random.default_rng(3)
    n = 50000
    x = np.concatenate([rng.normal(0.6, 0.1, n), rng.normal(0.3, 0.1, n)])
    y = np.concatenate([np.ones(n), np.zeros(n)])
    a1, b1 = fit_logistic(x, y, np.ones_like(x))
    a2, b2 = fit_logistic(x, y, np.where(y == 1, 0.2, 0.8))  # prior 20 % relevant
    assert a2 == pytest.approx(a1, rel=0.03)  # equal-variance classes: the slope does not depend on the prior
    assert (b2 + a2 * 0.45) - (b1 + a1 * 0.45) == pytest.approx(np.log(0.2 / 0.8), abs=0.05)


def test_committed_calibration_keeps_the_thresholds_meaning() -> None:
    cal = Calibration.load(CALIBRATION_PATH)
    data = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    assert cal.model_id == SHIPPED_MODEL_ID
    assert cal.a > 0  # more similar, more likely relevant
    assert -0.2 < cal.cosine_at(-4.0) < cal.cosine_at(0.0) < 1.0
    fitted = data["fitted"]
    assert fitted["positives"] >= 300
    assert fitted["pairs"] > fitted["positives"]
    assert {"date", "data", "method", "prior_top_candidate_relevant"} <= fitted.keys()


def test_the_model_service_modules_import_no_heavy_library() -> None:
    code = (
        "import sys, worker.app.commands.models, worker.clients.embeddings, worker.clients.tei, "
        "worker.clients.local_embedder, worker.testing.models\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'starlette', 'uvicorn'}\n"
        "heavy &= set(sys.modules)\n"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_models_serve_is_a_cli_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "worker.app.cli", "models", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0
    assert "--cross-encoder" in out.stdout
    assert "--embed-model" in out.stdout


def test_the_served_calibration_puts_an_off_topic_question_below_zero(
    embedding_model: EmbeddingModel,
) -> None:
    scorer = BiEncoderScorer(embedding_model, Calibration.load())
    post = "Shadows\n\nCall light->SetCastShadows(true) and raise the shadow map size in the renderer."
    on_topic, off_topic = (
        scorer.logits("How do I make my directional light cast shadows?", [post])[0],
        scorer.logits("What is the capital of Australia?", [post])[0],
    )
    assert off_topic < 0.0
    assert on_topic > off_topic + 2.0
