"""``citebot calibrate`` with a TEI cross-encoder configured: its logit is a feature of the fit
(``ce_logit``), the model set names it, and the worker with the same cross-encoder ranks with those
weights inside the second stage. TEI is the project's double (``worker.testing.models``: ``/info`` and
``/rerank`` as TEI answers them) behind httpx's MockTransport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import make_settings
from tests.worker.calibration.conftest import calibrate_args
from worker.calibration import store
from worker.clients.tei import TeiReranker
from worker.retrieval.factory import build_retriever
from worker.retrieval.recall import single_connection
from worker.retrieval.route import SHIPPED
from worker.settings import RerankerSettings
from worker.testing.models import FakeEmbedder, tei_info_body, tei_rerank_body

CE = "BAAI/bge-reranker-base"
BASE = "test-model+lexical-en"


class TeiDouble:
    """TEI serving ``model_id``; every ``/rerank`` body kept; ``down``: ``/rerank`` answers 503."""

    def __init__(self, model_id: str = CE, *, down: bool = False) -> None:
        self.model_id = model_id
        self.down = down
        self.rerank_bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json=tei_info_body(self.model_id))
        if self.down:
            return httpx.Response(503, json={"error": "overloaded", "error_type": "overloaded"})
        body = json.loads(request.content)
        self.rerank_bodies.append(body)
        return httpx.Response(200, json=tei_rerank_body(body))

    def reranker(self) -> TeiReranker:
        http = httpx.Client(transport=httpx.MockTransport(self.handle))
        return TeiReranker(http, RerankerSettings(base_url="http://tei.test", timeout_s=30.0))


@pytest.mark.integration
@pytest.mark.slow
def test_with_tei_the_cross_encoders_logit_is_fitted_and_the_worker_uses_it_with_the_same_one(
    indexed_sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from backfill.calibrate import run
    from worker.app.commands.calibrate import report

    settings = make_settings(indexed_sample, "redis://127.0.0.1:1/0")
    tei = TeiDouble()
    args = calibrate_args(tmp_path)
    assert run(settings, args, embedder=FakeEmbedder(model="test-model"), reranker=tei.reranker()) == 0
    out = json.loads((tmp_path / "out.json").read_text("utf-8"))
    assert out["model_set"] == f"{BASE}+ce:{CE}"  # the model set names the cross-encoder
    assert out["decision"] == store.ACTIVATED
    assert "ce_logit" in out["model"]["features"]
    assert out["model"]["weights"][out["model"]["features"].index("ce_logit")] != 0
    # TEI's RerankRequest (router/src/http/types.rs): query, texts, truncate, raw_scores, return_text;
    # logits asked (raw_scores), no text back (return_text left false)
    assert tei.rerank_bodies
    assert all(set(b) == {"query", "texts", "raw_scores", "truncate"} for b in tei.rerank_bodies)
    assert all(b["raw_scores"] is True and b["truncate"] is True for b in tei.rerank_bodies)
    capsys.readouterr()
    assert report(settings) == 0  # --report lists the model set fitted with the cross-encoder
    assert f"model set {BASE}+ce:{CE}\n  in use: weights from citebot calibrate" in capsys.readouterr().out

    with psycopg.connect(indexed_sample, autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        # the worker with the same cross-encoder: those weights, the logit read inside the stage
        same = TeiDouble()
        with build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=None,
            embedder=FakeEmbedder(model="test-model"),
            reranker=same.reranker(),
        ) as retriever:
            assert retriever.ranker(SHIPPED) == "stage"
            result = retriever.retrieve("How do I enable shadows on a directional light?")
            stage = result.trace.get("stage")
            assert stage is not None
            assert stage.info["model_set"] == f"{BASE}+ce:{CE}"
            assert stage.counts["ce"] > 0
            assert result.trace.get("rerank") is None  # no second pass: the logit is in the stage
            # one pass over the stage's candidates (in TEI batches of max_client_batch_size, 32)
            assert sum(len(b["texts"]) for b in same.rerank_bodies) == stage.counts["ce"]
            assert all(len(b["texts"]) <= 32 for b in same.rerank_bodies)
        # the same cross-encoder failing: the feature has no value (its mean), the answer goes out
        with build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=None,
            embedder=FakeEmbedder(model="test-model"),
            reranker=TeiDouble(down=True).reranker(),
        ) as retriever:
            result = retriever.retrieve("How do I enable shadows on a directional light?")
            stage = result.trace.get("stage")
            assert stage is not None
            assert stage.info["model_set"] == f"{BASE}+ce:{CE}"
            assert stage.counts["ce"] == 0
            assert any(f["stage"] == "stage_ce" for f in result.trace.fallbacks)
            assert result.sources
        # another cross-encoder: these weights are not its own
        other = TeiDouble("cross-encoder/ms-marco-MiniLM-L-6-v2")
        with build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=None,
            embedder=FakeEmbedder(model="test-model"),
            reranker=other.reranker(),
        ) as retriever:
            assert retriever.ranker(SHIPPED) != "stage"
            result = retriever.retrieve("How do I enable shadows on a directional light?")
            stage = result.trace.get("stage")
            assert stage is None or stage.info["model_set"] != f"{BASE}+ce:{CE}"
        # without a reranker: the model set without the cross-encoder (nothing fitted for it here)
        with build_retriever(
            settings,
            connections=single_connection(conn),
            keyword=None,
            embedder=FakeEmbedder(model="test-model"),
        ) as retriever:
            assert not retriever.has_stage_weights()
