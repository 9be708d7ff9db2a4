"""The second stage: features, the linear score, the weights file, and the retriever's switch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from eval.evaluation.fit_stage import logistic_regression, provisional
from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.domain import Candidate
from worker.errors import ConfigError
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.retrieval.stage import (
    FEATURES,
    QUESTION_FEATURES,
    TOPIC_FEATURES,
    Linear,
    StageModel,
    feature_rows,
    is_brief,
    load_model,
    model_set_id,
    question_row,
    rank,
    read_weights,
    topic_rows,
    write_model,
)
from worker.settings import RetrievalSettings
from worker.testing.models import FakeEmbedder


def cand(post_id: int, *, post_number: int = 2, cosine: float = 0.5, lexical: float = 0.0) -> Candidate:
    return Candidate(
        post_id=post_id,
        topic_id=post_id,
        post_number=post_number,
        topic_slug="s",
        topic_title="t",
        text="x",
        cosine=cosine,
        lexical=lexical,
    )


def model(**weights: float) -> StageModel:
    d = len(FEATURES)
    return StageModel("m", FEATURES, tuple(weights.get(f, 0.0) for f in FEATURES), (0.0,) * d, (1.0,) * d)


def test_features_normalise_the_lexical_score_per_question() -> None:
    rows = feature_rows([cand(1, lexical=4.0), cand(2, lexical=1.0, post_number=1), cand(3)])
    assert [r["lexical"] for r in rows] == [1.0, 0.25, 0.0]
    assert all(r["lexical_top"] == pytest.approx(np.log1p(4.0)) for r in rows)
    assert [r["first_post"] for r in rows] == [0.0, 1.0, 0.0]


def test_brief_questions_get_their_own_cosine_and_lexical_features() -> None:
    brief = feature_rows([cand(1, cosine=0.6, lexical=2.0)], brief=True)[0]
    long = feature_rows([cand(1, cosine=0.6, lexical=2.0)], brief=False)[0]
    assert (brief["brief_cosine"], brief["brief_lexical"]) == (pytest.approx(0.6), 1.0)
    assert (long["brief_cosine"], long["brief_lexical"]) == (0.0, 0.0)
    assert is_brief("Hi all,\n\nHow do I set the fog colour of a zone?")
    assert not is_brief("How do I set the fog colour of a zone? " * 6)
    # code and logs are not what the question says: a one-line question with a long log is brief
    assert is_brief("Why does this crash?\n```\n" + "frame 0x0042 in Node::Update()\n" * 20 + "```")


def test_rank_orders_by_the_weighted_score_and_prefers_replies() -> None:
    question_post = cand(1, post_number=1, cosine=0.8)
    answer = cand(2, cosine=0.7)
    ranked = rank(model(cosine=10.0, first_post=-2.0), [question_post, answer])
    assert [c.post_id for c in ranked] == [2, 1]
    assert ranked[0].stage == pytest.approx(7.0)
    assert ranked[1].stage == pytest.approx(6.0)


def test_weights_file_round_trip_and_a_missing_model_set_names_the_fit_command(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    four = ("cosine", "lexical", "lexical_top", "first_post")  # a model may use some features only
    m = StageModel("set-a", four, (1.0, 0.5, 0.2, -1.0), (0.5, 0.3, 1.0, 0.2), (0.1, 0.3, 0.5, 0.4), -3.0)
    write_model(m, {"fitted": "now"}, path=path)
    assert load_model("set-a", path=path) == m
    assert json.loads(path.read_text())["model_sets"]["set-a"]["fitted"] == "now"
    with pytest.raises(ConfigError, match="fit-stage"):
        load_model("set-b", path=path)
    with pytest.raises(ValueError, match="unknown"):
        StageModel("x", ("cosine", "colour"), (1.0, 1.0), (0.0, 0.0), (1.0, 1.0))


def test_shipped_weights_cover_the_shipped_embedder() -> None:
    sets = read_weights()["model_sets"]
    assert model_set_id("sentence-transformers/all-MiniLM-L6-v2") in sets
    with_second = model_set_id(
        "sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-mpnet-base-v2"
    )
    assert (
        with_second
        == "sentence-transformers/all-MiniLM-L6-v2+lexical-en+sentence-transformers/all-mpnet-base-v2"
    )
    assert load_model(with_second).uses_excerpt
    assert not load_model(model_set_id("sentence-transformers/all-MiniLM-L6-v2")).uses_excerpt


def test_logistic_regression_recovers_the_direction() -> None:
    rng = np.random.default_rng(19)
    x = rng.normal(size=(2000, 3))
    y = (x @ np.array([2.0, -1.0, 0.0]) + rng.normal(size=2000) > 0).astype(float)
    w, _ = logistic_regression(x, y, l2=1.0)
    assert w[0] > 1.0
    assert w[1] < -0.5
    assert abs(w[2]) < 0.3


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


@pytest.mark.integration
def test_retrieve_with_the_second_stage_fuses_both_channels_and_sets_the_zone(
    conn: psycopg.Connection,
) -> None:
    # Post 3 is far in cosine but the only one with the question's words: the lexical channel
    # brings it in, the stage gives it its cosine (computed for it) and ranks it by the weights.
    insert_post(conn, 1, angle_vector(5), topic_id=1, post_number=1, title="Fog", text="Fog looks bad")
    insert_post(conn, 2, angle_vector(10), topic_id=1, post_number=2, title="Fog", text="Use a fog end")
    insert_post(conn, 3, angle_vector(80), topic_id=2, title="Shadow acne", text="Raise the depth bias")
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 10, "sources_k": 3})
    question = "shadow acne depth bias"
    embedder = FakeEmbedder(model="test-model", table={question: angle_vector(0)})
    connections = single_connection(conn)  # one lock for the one connection both read through
    index = PostgresPostIndex(connections, s, model="test-model", dimension=8)
    lexical = PostgresLexicalIndex(connections)
    with Retriever(embedder, index, None, None, s, lexical=lexical) as retriever:
        with pytest.raises(ConfigError, match="fit-stage"):
            retriever.retrieve(
                question, route=Route(keyword=True, ranker="stage")
            )  # no weights for test-model
        retriever.use_stage_model(model(lexical=5.0, cosine=1.0, first_post=-1.0))
        result = retriever.retrieve(question, route=Route(keyword=True, ranker="stage"))
        plain = retriever.retrieve(question, route=Route(lexical=False, ranker="fused"))
    assert [c.post_id for c in result.candidates] == [3, 2, 1]
    top = result.candidates[0]
    assert top.cosine == pytest.approx(np.cos(np.radians(80)), abs=1e-3)  # filled in by the stage
    assert top.stage is not None
    assert result.zone in ("abstain", "weak", "normal")
    assert result.trace.info["config"]["ranker"] == "stage"
    assert [c.post_id for c in plain.candidates] == [1, 2]  # today's shape: cosine alone here


@pytest.mark.integration
def test_the_abstention_score_sets_the_abstain_zone_and_the_top_post_score_the_rest(
    conn: psycopg.Connection,
) -> None:
    insert_post(conn, 1, angle_vector(10), topic_id=1, post_number=2, title="Fog", text="Use a fog end")
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 10, "sources_k": 3})
    question = "fog end"
    embedder = FakeEmbedder(model="test-model", table={question: angle_vector(0)})
    connections = single_connection(conn)
    index = PostgresPostIndex(connections, s, model="test-model", dimension=8)
    lexical = PostgresLexicalIndex(connections)
    d = len(QUESTION_FEATURES)
    sure = replace(model(cosine=1.0), bias=50.0)  # a top post score far in the normal zone
    zones = {}
    with Retriever(embedder, index, None, None, s, lexical=lexical) as retriever:
        for name, bias in (("doubt", -5.0), ("answerable", 5.0)):
            abstention = Linear(QUESTION_FEATURES, (0.0,) * d, (0.0,) * d, (1.0,) * d, bias)
            retriever.use_stage_model(replace(sure, abstention=abstention, abstain_below=0.0))
            result = retriever.retrieve(question, route=Route(keyword=True, ranker="stage"))
            stage = result.trace.get("stage")
            assert stage is not None
            zones[name] = (result.zone, stage.info["answerable"])
    assert zones == {"doubt": ("abstain", -5.0), "answerable": ("normal", 5.0)}


def test_provisional_model_is_cosine_alone() -> None:
    m = provisional("x")
    assert dict(zip(m.features, m.weights, strict=True))["cosine"] == 1.0
    assert sum(abs(w) for w in m.weights) == 1.0


def topic_cand(post_id: int, topic_id: int, *, post_number: int = 2, cosine: float = 0.5) -> Candidate:
    return replace(cand(post_id, post_number=post_number, cosine=cosine), topic_id=topic_id)


def with_topic(base: StageModel, within: float = 1.0, bias: float = 0.0, **weights: float) -> StageModel:
    d = len(TOPIC_FEATURES)
    w = tuple(weights.get(f, 0.0) for f in TOPIC_FEATURES)
    topic = Linear(TOPIC_FEATURES, w, (0.0,) * d, (1.0,) * d, bias)
    return replace(base, topic=topic, within=within)


def test_a_topic_score_orders_topics_by_pooled_evidence_and_its_answer_first() -> None:
    # topic 7: two replies a little below topic 9's one reply; pooled, topic 7 holds more evidence
    cands = [
        topic_cand(1, 9, cosine=0.65),
        topic_cand(2, 7, cosine=0.6),
        topic_cand(3, 7, cosine=0.6),
        topic_cand(4, 7, post_number=1, cosine=0.9),  # topic 7's question: not an answer
    ]
    post_model = model(cosine=10.0, first_post=-5.0)
    assert [c.post_id for c in rank(post_model, cands)] == [1, 2, 3, 4]
    pooled = with_topic(post_model, 0.5, -65.0, pooled=10.0)  # log-odds 1.9 for topic 7, 0 for 9
    ranked = rank(pooled, cands)
    assert [c.post_id for c in ranked] == [2, 3, 1, 4]  # topic 7's replies first, then topic 9
    assert ranked[0].stage == pytest.approx(6.0)  # ``stage`` stays the post score
    # a post's share of its topic counts too: at full weight, two equal replies halve each other
    assert next(c.post_id for c in rank(replace(pooled, within=1.0), cands)) == 1


def test_topics_pool_their_replies_only_unless_they_have_none() -> None:
    rows = feature_rows(
        [topic_cand(1, 5, post_number=1, cosine=0.9), topic_cand(2, 5), topic_cand(3, 6, post_number=1)]
    )
    pooled = topic_rows([5, 5, 6], [4.0, 1.0, 2.0], rows)
    assert pooled[5]["best"] == 1.0
    assert pooled[5]["count"] == 0.0
    assert pooled[5]["best_cosine"] == pytest.approx(0.5)
    assert pooled[6]["best"] == 2.0  # only its question among the candidates: that is pooled
    assert np.isnan(pooled[5]["best_excerpt"])


def test_question_row_reads_the_top_score_its_gap_to_the_fifth_and_brevity() -> None:
    rows = feature_rows([cand(i, cosine=0.1 * i) for i in range(1, 8)], brief=True)
    q = question_row([7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0], rows)
    assert (q["top"], q["gap"], q["brief"]) == (7.0, 4.0, 1.0)
    assert q["top_cosine"] == pytest.approx(0.7)
    assert question_row([2.0, 1.0], feature_rows([cand(1), cand(2)]))["gap"] == 1.0  # fewer than five
    assert question_row([2.0], feature_rows([cand(1)]))["brief"] == 0.0


def test_topic_and_abstention_parts_round_trip_through_the_weights_file(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    d = len(QUESTION_FEATURES)
    abstention = Linear(QUESTION_FEATURES, (1.0,) * d, (0.0,) * d, (2.0,) * d, -1.0)
    m = replace(with_topic(model(cosine=1.0), 0.5, pooled=2.0), abstention=abstention, abstain_below=-0.3)
    write_model(replace(m, model_set="set-a"), {"fitted": "now"}, path=path)
    back = load_model("set-a", path=path)
    assert back == replace(m, model_set="set-a")
    assert back.answerable([], []) is None
    rows = feature_rows([cand(1, cosine=0.5)])
    assert back.answerable([1.0], rows) == pytest.approx(abstention.score(question_row([1.0], rows)))
    assert model(cosine=1.0).answerable([1.0], rows) is None  # no abstention part: the top score decides
    with pytest.raises(ValueError, match="overwrite"):
        write_model(replace(m, model_set="set-a"), {"abstention": {"fit": "figures"}}, path=path)
    with pytest.raises(ValueError, match="unknown"):
        Linear(("colour",), (1.0,), (0.0,), (1.0,))
