"""Zone thresholds belong to the reranker that produced the scores (issue 16, item 2).

The local model server's calibrated bi-encoder never scores an off-topic question below the seed's
−4, so with thresholds that ignore the reranker the shipped defaults never abstain. These tests run
the real server (shipped MiniLM and its committed calibration) behind the real ``TeiReranker``: the
retriever reads the scorer's id from ``/info`` and takes the thresholds calibrated for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from pgvector.psycopg import register_vector

from eval.stack.modelserver.models import BiEncoderScorer, Calibration, EmbeddingModel
from eval.stack.modelserver.server import ModelServerThread
from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.clients.tei import TeiReranker, reranker_id
from worker.retrieval.aggregate import SEED, read_table, thresholds_for, write_thresholds
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.settings import RerankerSettings, load_settings
from worker.testing.models import FakeEmbedder

OFF_TOPIC = "How long should I boil an egg for a runny yolk?"
ON_TOPIC = "My physics objects fall through the terrain, how do I add a collision shape?"
# As in a real index, the off-topic question finds a post that shares a word or two ("boiling"):
# the calibrated bi-encoder gives it about -1.7, well above the seed's -4.
POSTS = [
    ("Objects falling through terrain", "Add a CollisionShape with SetTerrain() next to the RigidBody."),
    (
        "Timer for a boiling pot animation",
        "I want an animated pot whose water starts boiling after a few seconds, how do I run a timer?",
    ),
    (
        "Water shader recipe",
        "My recipe for a simple water surface: a scrolling normal map, fresnel and a bit of refraction.",
    ),
]
MINILM_SCORER = "calibrated-bi-encoder:sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def model_server() -> Iterator[str]:
    model = EmbeddingModel()
    with ModelServerThread(model, BiEncoderScorer(model, Calibration.load())) as running:
        yield running.url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        for i, (title, body) in enumerate(POSTS, start=1):
            insert_post(c, i, angle_vector(10 * i), topic_id=i, title=title, text=f"{title}\n\n{body}")
        yield c


@pytest.mark.integration
def test_shipped_defaults_abstain_off_topic_with_the_local_reranker(
    conn: psycopg.Connection, model_server: str
) -> None:
    s = load_settings().retrieval  # the shipped defaults: no threshold set anywhere
    assert s.abstain_below is None
    assert s.weak_below is None
    s = s.model_copy(update={"recall_k": 3})
    embedder = FakeEmbedder(model="test-model", table={OFF_TOPIC: angle_vector(0), ON_TOPIC: angle_vector(0)})
    index = PostgresPostIndex(single_connection(conn), s, model="test-model", dimension=8)
    with httpx.Client() as http:
        reranker = TeiReranker(http, RerankerSettings(base_url=model_server, timeout_s=60))  # type: ignore[call-arg]
        with Retriever(embedder, index, None, reranker, s) as retriever:
            off = retriever.retrieve(OFF_TOPIC)
            on = retriever.retrieve(ON_TOPIC)
            limits = retriever.thresholds()
    assert reranker.reranker_id == MINILM_SCORER
    assert limits.abstain_below > SEED.abstain_below  # calibrated for this scorer, not the seed's -4
    top = off.candidates[0].logit
    assert top is not None
    assert SEED.abstain_below < top < limits.abstain_below
    assert off.zone == "abstain"
    assert on.zone != "abstain"


def test_a_cross_encoder_keeps_the_seeds_thresholds() -> None:
    tei_info = {"model_id": "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1", "model_type": {"reranker": {}}}
    scorer = reranker_id(tei_info)
    assert scorer == "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1"
    limits = thresholds_for(scorer)
    assert (limits.abstain_below, limits.weak_below) == (SEED.abstain_below, SEED.weak_below) == (-4.0, 0.0)
    assert thresholds_for("some-unknown-reranker") == SEED
    assert thresholds_for(None) == SEED


def test_the_local_servers_info_names_its_scorer_apart() -> None:
    info = {
        "model_id": "sentence-transformers/all-MiniLM-L6-v2",
        "scorer": "calibrated-bi-encoder",
        "reranker_model_id": "sentence-transformers/all-MiniLM-L6-v2",
    }
    assert reranker_id(info) == MINILM_SCORER
    assert reranker_id({"model_id": ""}) is None


def test_settings_override_the_table_for_every_scorer() -> None:
    limits = thresholds_for(MINILM_SCORER, abstain_below=-6.0)
    assert limits.abstain_below == -6.0
    assert limits.weak_below == thresholds_for(MINILM_SCORER).weak_below
    assert "settings" in limits.source


def test_shipped_table_covers_each_shipped_scorer_and_says_how_it_was_fitted() -> None:
    table = read_table()["scorers"]
    assert table["cross-encoder/mmarco-mMiniLMv2-L12-H384-v1"]["abstain_below"] == -4.0
    row = table[MINILM_SCORER]
    assert row["abstain_below"] <= row["weak_below"]
    held = row["heldout_test_half"]
    assert held["ood_recall"] >= 0.9
    assert held["answerable_abstained_rate"] <= 0.05


def test_write_keeps_other_scorers_and_validates_the_order(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_thresholds("a", -1.0, 1.0, {"fitted": "now"}, path=path)
    write_thresholds("b", -2.0, 0.5, {}, path=path)
    data = json.loads(path.read_text())
    assert set(data["scorers"]) == {"a", "b"}
    assert thresholds_for("a", path=path).abstain_below == -1.0
    with pytest.raises(ValueError, match="abstain_below"):
        write_thresholds("c", 1.0, 0.0, {}, path=path)


def test_the_demo_sets_no_threshold_of_its_own() -> None:
    demo = Path(__file__).resolve().parents[3] / "eval" / "demo" / "run.py"
    assert "ABSTAIN_BELOW" not in demo.read_text(encoding="utf-8")
