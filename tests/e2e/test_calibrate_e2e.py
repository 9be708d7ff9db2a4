"""``citebot calibrate`` with the model clients a production worker uses: the embedder and the
reranker over HTTP (TEI here, the model double speaking TEI's contract), the forum through its API.

The stack's forum has fewer solved topics than the floor, so the run keeps the shipped weights and says
why; what this checks is that the command builds its retriever with an HTTP client, as the worker's
runtime does (it refused every HTTP embedder: "embeddings provider 'tei' needs an HTTP client").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.stack import open_stack

pytestmark = pytest.mark.integration


def test_calibrate_runs_with_the_http_embedder_and_reranker_the_worker_uses(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with open_stack(db_url, redis_url, tmp_path) as stack:
        assert stack.env["CITEBOT_EMBEDDINGS__PROVIDER"] == "tei"
        out = tmp_path / "calibrate.json"
        done = subprocess.run(
            [sys.executable, "-m", "worker.app.cli", "calibrate", "--source", "api", "--min-topics", "20",
             "--out", str(out)],
            env=stack.env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text("utf-8"))
    assert result["decision"] == "too_little_data"
    assert result["model_set"] == "test-model+lexical-en+ce:test-model"  # the reranker's logit is a feature
    assert "shipped weights stay" in done.stdout
