"""The route one retrieval runs: the shipped default (issue 35) and the ranker ``auto`` resolves to."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import SHIPPED, Route, is_cross_encoder, resolve_ranker
from worker.retrieval.stage import FEATURES, StageModel
from worker.settings import RetrievalSettings
from worker.testing.models import FakeEmbedder, FakeReranker

QUESTION = "shadow acne depth bias"


@pytest.mark.parametrize(
    ("weights", "reranker", "cross", "expected"),
    [
        (True, False, False, "stage"),
        (True, True, True, "stage+rerank"),
        (True, True, False, "stage"),  # the model server's bi-encoder does not join the stage
        (False, True, True, "rerank"),
        (False, True, False, "rerank"),  # without weights any reranker's calibrated zones beat none
        (False, False, False, "fused"),
    ],
)
def test_auto_is_the_stage_when_fitted_joined_by_a_cross_encoder(
    weights: bool, reranker: bool, cross: bool, expected: str
) -> None:
    assert resolve_ranker("auto", has_weights=weights, reranker=reranker, cross_encoder=cross) == expected
    assert resolve_ranker("fused", has_weights=weights, reranker=reranker, cross_encoder=cross) == "fused"


def test_the_default_route_is_both_channels_without_discourse_search() -> None:
    assert (SHIPPED.vector, SHIPPED.lexical, SHIPPED.keyword, SHIPPED.ranker) == (True, True, False, "auto")
    with pytest.raises(ValueError, match="cosine channel"):
        Route(vector=False, ranker="stage")
    with pytest.raises(ValueError, match="unknown ranker"):
        Route(ranker="bm25")  # type: ignore[arg-type]


def test_only_the_model_servers_bi_encoder_is_not_a_cross_encoder() -> None:
    assert is_cross_encoder("BAAI/bge-reranker-v2-m3")
    assert is_cross_encoder(None)  # a TEI whose /info a proxy hides
    assert not is_cross_encoder("calibrated-bi-encoder:sentence-transformers/all-MiniLM-L6-v2")


class BiEncoderScorer(FakeReranker):
    """The local model server's /rerank: a calibrated bi-encoder, not a cross-encoder."""

    reranker_id = "calibrated-bi-encoder:test-model"


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def fill(conn: psycopg.Connection) -> None:
    """Post 3 is far in cosine but the only one with the question's words (only the lexical channel
    finds it among the first two)."""
    insert_post(conn, 1, angle_vector(5), topic_id=1, post_number=1, title="Fog", text="Fog looks bad")
    insert_post(conn, 2, angle_vector(10), topic_id=1, post_number=2, title="Fog", text="Use a fog end")
    insert_post(conn, 3, angle_vector(80), topic_id=2, title="Shadow acne", text="Raise the depth bias")


def weights() -> StageModel:
    d = len(FEATURES)
    w = {"lexical": 5.0, "cosine": 1.0, "first_post": -1.0}
    return StageModel("m", FEATURES, tuple(w.get(f, 0.0) for f in FEATURES), (0.0,) * d, (1.0,) * d)


def retriever(conn: psycopg.Connection, reranker: FakeReranker | None = None) -> Retriever:
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 10, "sources_k": 3})
    connections = single_connection(conn)
    index = PostgresPostIndex(connections, s, model="test-model", dimension=8)
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    return Retriever(embedder, index, None, reranker, s, lexical=PostgresLexicalIndex(connections))


@pytest.mark.integration
def test_the_default_ranks_by_the_second_stage_when_its_weights_are_fitted(conn: psycopg.Connection) -> None:
    fill(conn)
    with retriever(conn) as r:
        r.use_stage_model(weights())
        result = r.retrieve(QUESTION)  # no switch: what the worker runs
    assert [c.post_id for c in result.candidates] == [3, 2, 1]
    assert result.trace.get("stage") is not None
    assert result.trace.info["config"]["ranker"] == "stage"


@pytest.mark.integration
def test_a_cross_encoder_reads_the_stages_shortlist_and_its_logit_sets_the_zone(
    conn: psycopg.Connection,
) -> None:
    fill(conn)
    # the cross-encoder prefers post 2; its top logit -1 is weak on the seed's -4 / 0
    cross = FakeReranker(score_fn=lambda q, text: -1.0 if "fog end" in text else -7.0)
    with retriever(conn, cross) as r:
        r.use_stage_model(weights())
        result = r.retrieve(QUESTION)
    assert cross.calls
    assert cross.calls[0].texts[0].startswith("Shadow acne")  # the stage's order
    assert [c.post_id for c in result.candidates][:1] == [2]
    assert result.zone == "weak"
    assert result.floor == -4.0
    assert result.trace.info["config"]["ranker"] == "stage+rerank"


@pytest.mark.integration
def test_the_model_servers_bi_encoder_does_not_join_the_stage(conn: psycopg.Connection) -> None:
    fill(conn)
    scorer = BiEncoderScorer()
    with retriever(conn, scorer) as r:
        r.use_stage_model(weights())
        result = r.retrieve(QUESTION)
    assert scorer.calls == []
    assert [c.post_id for c in result.candidates] == [3, 2, 1]


@pytest.mark.integration
def test_without_fitted_weights_the_default_needs_none(conn: psycopg.Connection) -> None:
    """A model set with no weights (bge-m3 through Ollama, say): both channels fused; the cross-encoder
    orders and sets the zone when there is one, else the fused order in zone normal, said at start."""
    fill(conn)
    with retriever(conn) as r:
        assert not r.has_stage_weights()
        assert "no second-stage weights" in r.describe()
        fused = r.retrieve(QUESTION)
    assert fused.trace.info["config"]["ranker"] == "fused"
    assert 3 in [c.post_id for c in fused.candidates]  # the lexical channel brought it
    assert (fused.zone, fused.floor) == ("normal", None)
    cross = FakeReranker(score_fn=lambda q, text: -2.0 if "fog end" in text else -7.0)
    with retriever(conn, cross) as r:
        reranked = r.retrieve(QUESTION)
    assert reranked.trace.info["config"]["ranker"] == "rerank"
    assert fused.candidates[0].post_id == 1
    assert reranked.candidates[0].post_id == 2  # the cross-encoder's order over the fused candidates
    assert reranked.zone == "weak"  # its top logit on the seed's -4 / 0
