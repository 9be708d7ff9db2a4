"""The second bi-encoder's column: filled by its own resumable pass, read by candidate id, a stage
feature that falls back (recorded in the trace) when the model or the column fails."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from backfill.excerpts import fill_excerpts
from tests.conftest import make_settings
from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.errors import IndexMismatchError, ServiceUnavailableError
from worker.retrieval.excerpts import PostgresExcerptIndex, excerpt_of, read_excerpt_meta
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.rerank import rerank_text
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.retrieval.stage import FEATURES, StageModel
from worker.retrieval.threads import PostgresThreadIndex
from worker.settings import RetrievalSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration

SECOND = "second-model"


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def database(db_url: str):  # type: ignore[no-untyped-def]
    return make_settings(db_url, "redis://127.0.0.1:1/0").database


def rows(conn: psycopg.Connection) -> dict[int, bytes]:
    return {int(r[0]): bytes(r[1]) for r in conn.execute("SELECT post_id, digest FROM excerpt_vectors")}


def test_the_pass_embeds_each_excerpt_once_records_the_model_and_resumes(
    conn: psycopg.Connection, db_url: str
) -> None:
    for pid in range(1, 6):
        insert_post(conn, pid, angle_vector(pid * 10), title=f"Title {pid}", text="x " * 400)
    second = FakeEmbedder(model=SECOND, dimension=4)
    first = fill_excerpts(database(db_url), second, limit=3, page_size=2)
    assert (first.embedded, first.failed) == (3, 0)
    assert read_excerpt_meta(conn) == (SECOND, 4)
    # the excerpt the cross-encoder reads: the title and the post's first 300 characters, hashed
    text = conn.execute("SELECT topic_title, text FROM post_index WHERE post_id = 1").fetchone()
    assert rows(conn)[1] == excerpt_of(text[0], text[1])[1]
    assert len(second.calls[0][0][0]) <= len("Title 1") + 2 + 300
    assert second.calls[0][0][0] == rerank_text(text[0], text[1])
    rest = fill_excerpts(database(db_url), second, page_size=2)  # a later run fills what is missing
    assert (rest.embedded, rest.skipped) == (2, 3)
    assert set(rows(conn)) == {1, 2, 3, 4, 5}
    again = fill_excerpts(database(db_url), second)
    assert (again.embedded, again.skipped) == (0, 5)  # nothing changed: nothing embedded


def test_a_changed_excerpt_is_embedded_again_and_orphans_go(conn: psycopg.Connection, db_url: str) -> None:
    for pid in (1, 2, 3):
        insert_post(conn, pid, angle_vector(0), title="Fog", text=f"post {pid}")
    second = FakeEmbedder(model=SECOND, dimension=4)
    fill_excerpts(database(db_url), second)
    conn.execute("UPDATE post_index SET topic_title = 'Thick fog' WHERE post_id = 2")
    conn.execute("DELETE FROM post_index WHERE post_id = 3")
    summary = fill_excerpts(database(db_url), second)
    assert (summary.embedded, summary.skipped, summary.removed) == (1, 1, 1)
    assert set(rows(conn)) == {1, 2}


def test_another_model_is_never_mixed_in_unless_the_column_is_reset(
    conn: psycopg.Connection, db_url: str
) -> None:
    insert_post(conn, 1, angle_vector(0))
    fill_excerpts(database(db_url), FakeEmbedder(model=SECOND, dimension=4))
    other = FakeEmbedder(model="other-model", dimension=6)
    with pytest.raises(IndexMismatchError, match="second-model"):
        fill_excerpts(database(db_url), other)
    summary = fill_excerpts(database(db_url), other, reset=True)
    assert summary.embedded == 1
    assert read_excerpt_meta(conn) == ("other-model", 6)


def test_cosines_are_read_by_candidate_id(conn: psycopg.Connection, db_url: str) -> None:
    for pid in (1, 2):
        insert_post(conn, pid, angle_vector(0), title="T", text=f"p{pid}")
    table = {rerank_text("T", f"T\n\np{pid}"): angle_vector(pid * 30, 4) for pid in (1, 2)}
    fill_excerpts(database(db_url), FakeEmbedder(table=table, model=SECOND, dimension=4))
    index = PostgresExcerptIndex(single_connection(conn), model=SECOND, dimension=4)
    got = index.cosines(angle_vector(0, 4), [1, 2, 99])
    assert got == {1: pytest.approx(math.cos(math.radians(30)), abs=1e-5), 2: pytest.approx(0.5, abs=1e-5)}
    with pytest.raises(IndexMismatchError):
        PostgresExcerptIndex(single_connection(conn), model="other", dimension=4).cosines(
            angle_vector(0, 4), [1]
        )


def test_a_column_never_filled_is_an_error_the_stage_can_fall_back_from(conn: psycopg.Connection) -> None:
    index = PostgresExcerptIndex(single_connection(conn), model=SECOND, dimension=4)
    with pytest.raises(Exception, match="never filled"):
        index.cosines(angle_vector(0, 4), [1])


def two_topics(conn: psycopg.Connection) -> None:
    # Post 11 is nearer the question for the recall model; post 21's excerpt is nearer for the second.
    insert_post(conn, 11, angle_vector(10), topic_id=1, title="Fog", text="fog a")
    insert_post(conn, 21, angle_vector(20), topic_id=2, title="Mist", text="mist b")


def stage_models() -> tuple[StageModel, StageModel]:
    d = len(FEATURES)
    base = StageModel(
        "base", FEATURES, tuple(1.0 if f == "cosine" else 0.0 for f in FEATURES), (0.0,) * d, (1.0,) * d
    )
    weights = tuple({"cosine": 1.0, "excerpt_cosine": 5.0}.get(f, 0.0) for f in FEATURES)
    with_second = StageModel("base+second", FEATURES, weights, (0.0,) * d, (1.0,) * d)
    return base, with_second


def retriever_for(conn: psycopg.Connection, second: FakeEmbedder) -> Retriever:
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 2, "stage_topics": 2})
    connections = single_connection(conn)
    question = "how thick is the fog"
    r = Retriever(
        FakeEmbedder(model="test-model", table={question: angle_vector(0)}),
        PostgresPostIndex(connections, s, model="test-model", dimension=8),
        None,
        None,
        s,
        lexical=PostgresLexicalIndex(connections),
        threads=PostgresThreadIndex(connections),
        excerpts=PostgresExcerptIndex(connections, model=SECOND, dimension=4),
        excerpt_embedder=second,
    )
    base, with_second = stage_models()
    r.use_stage_model(base, excerpt=False)
    r.use_stage_model(with_second, excerpt=True)
    return r


def second_model(question_angle: float = 0.0) -> FakeEmbedder:
    return FakeEmbedder(
        table={
            "how thick is the fog": angle_vector(question_angle, 4),
            rerank_text("Fog", "Fog\n\nfog a"): angle_vector(80, 4),
            rerank_text("Mist", "Mist\n\nmist b"): angle_vector(5, 4),
        },
        model=SECOND,
        dimension=4,
    )


def test_the_second_models_cosine_is_a_stage_feature(conn: psycopg.Connection, db_url: str) -> None:
    two_topics(conn)
    second = second_model()
    fill_excerpts(database(db_url), second)
    with retriever_for(conn, second) as r:
        with_it = r.retrieve("how thick is the fog", route=Route(keyword=True, ranker="stage"))
        without = r.retrieve("how thick is the fog", route=Route(keyword=True, ranker="stage", excerpt=False))
    assert [c.post_id for c in without.candidates] == [11, 21]
    assert [c.post_id for c in with_it.candidates] == [21, 11]
    assert with_it.stage_features[0]["excerpt_cosine"] == pytest.approx(math.cos(math.radians(5)), abs=1e-4)
    assert math.isnan(without.stage_features[0]["excerpt_cosine"])
    assert with_it.trace.fallbacks == []
    # the question was embedded once by the second model, as a query
    assert [kind for texts, kind in second.calls if texts == ("how thick is the fog",)] == ["query"]
    stage = with_it.trace.get("stage")
    assert stage is not None
    assert stage.info["model_set"] == "base+second"


@pytest.mark.parametrize("failure", ["model", "column"])
def test_a_failing_second_model_or_column_falls_back_to_the_set_without_it(
    conn: psycopg.Connection, db_url: str, failure: str
) -> None:
    two_topics(conn)
    second = second_model()
    if failure == "model":
        fill_excerpts(database(db_url), second)
        second.fail_with = ServiceUnavailableError("down", service="excerpt-embeddings")
    # "column": never filled
    with retriever_for(conn, second) as r:
        result = r.retrieve("how thick is the fog", route=Route(keyword=True, ranker="stage"))
    assert [c.post_id for c in result.candidates] == [11, 21]  # the answer still goes out
    assert [f["stage"] for f in result.trace.fallbacks] == ["excerpt"]
    stage = result.trace.get("stage")
    assert stage is not None
    assert stage.info["model_set"] == "base"


def test_a_post_without_a_vector_counts_as_the_mean(conn: psycopg.Connection, db_url: str) -> None:
    two_topics(conn)
    second = second_model()
    fill_excerpts(database(db_url), second, post_ids=[11])  # post 21 has no vector yet
    with retriever_for(conn, second) as r:
        result = r.retrieve("how thick is the fog", route=Route(keyword=True, ranker="stage"))
    by_id = {c.post_id: f for c, f in zip(result.candidates, result.stage_features, strict=True)}
    assert math.isnan(by_id[21]["excerpt_cosine"])
    assert not math.isnan(by_id[11]["excerpt_cosine"])
    assert all(math.isfinite(c.stage or 0.0) for c in result.candidates)


def test_a_real_second_model_fills_and_reads_the_same_cosines(conn: psycopg.Connection, db_url: str) -> None:
    # MiniLM, the model CI has, standing in for the second bi-encoder (all-mpnet-base-v2 in production).
    from worker.clients.embeddings import build_excerpt_embedder

    pytest.importorskip("sentence_transformers")
    settings = make_settings(
        db_url,
        "redis://127.0.0.1:1/0",
        excerpt_embeddings={"model": "sentence-transformers/all-MiniLM-L6-v2", "dimension": 384},
    )
    model = build_excerpt_embedder(settings, None)
    assert model is not None
    insert_post(
        conn, 1, angle_vector(0), title="Fog of the zone", text="Set the fog end closer to the camera."
    )
    insert_post(conn, 2, angle_vector(0), title="Physics", text="Rigid bodies fall through the floor.")
    assert fill_excerpts(settings.database, model).embedded == 2
    question = "how do I make the fog thicker"
    q = np.asarray(model.embed([question], kind="query")[0])
    got = PostgresExcerptIndex(single_connection(conn), model=model.model, dimension=384).cosines(q, [1, 2])
    for pid in (1, 2):
        title, text = conn.execute(
            "SELECT topic_title, text FROM post_index WHERE post_id = %s", (pid,)
        ).fetchone()
        v = np.asarray(model.embed([rerank_text(title, text)])[0])
        assert got[pid] == pytest.approx(float(q @ v), abs=1e-5)
    assert got[1] > got[2]
