"""Whole topics for the second stage: each post's place in its topic, and the answer cited for it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import angle_vector, describe_category, insert_post
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.retrieval.stage import FEATURES, StageModel
from worker.retrieval.threads import PostFacts, PostgresThreadIndex
from worker.settings import RetrievalSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def solved_topic(conn: psycopg.Connection, *, topic: int = 7, base: int = 70) -> None:
    """Asker ``ann`` asks (#1); ``bob`` chats (#2, a reply to #1); ``cid`` answers bob (#3, a reply
    to #2); ann thanks cid (#4, a reply to #3); ann adds a detail (#5)."""
    rows = [
        (1, "ann", None, 10, "How do I make the fog thicker?"),
        (2, "bob", 1, 30, "Same problem here, following."),
        (3, "cid", 2, 85, "Set the zone's fog end closer."),
        (4, "ann", 3, 70, "Thanks, that did it."),
        (5, "ann", None, 80, "Also the fog colour matters."),
    ]
    for number, user, reply_to, angle, text in rows:
        insert_post(
            conn,
            base + number,
            angle_vector(angle),
            topic_id=topic,
            post_number=number,
            title="Fog",
            text=text,
            username=user,
            reply_to=reply_to,
        )


def test_posts_of_reads_each_posts_place_in_its_topic(conn: psycopg.Connection) -> None:
    solved_topic(conn)
    threads = PostgresThreadIndex(single_connection(conn))
    thread = threads.posts_of(angle_vector(0), [7])
    assert [c.post_number for c in thread.posts] == [1, 2, 3, 4, 5]
    facts = {c.post_number: thread.facts[c.post_id] for c in thread.posts}
    assert facts[2] == PostFacts(first_reply=True, to_question=True, by_asker=False, asker_followed=False)
    assert facts[3] == PostFacts(first_reply=False, to_question=False, by_asker=False, asker_followed=True)
    assert facts[4].by_asker
    assert not facts[4].asker_followed  # the asker's own posts are never "followed"
    assert facts[5].to_question  # no reply-to: a reply to the topic
    assert thread.posts[2].cosine == pytest.approx(0.0872, abs=2e-3)  # cos 85°
    assert thread.topic_best() == {7: pytest.approx(0.985, abs=2e-3)}  # cos 10°, the question


def test_excluded_posts_are_left_out_but_keep_the_facts_of_the_others(conn: psycopg.Connection) -> None:
    solved_topic(conn)
    thread = PostgresThreadIndex(single_connection(conn)).posts_of(angle_vector(0), [7], [71, 72])
    assert [c.post_number for c in thread.posts] == [3, 4, 5]
    # hiding the question and the first reply changes neither who asked nor which reply came first
    assert thread.facts[73].asker_followed
    assert not thread.facts[73].first_reply
    assert thread.facts[74].by_asker
    assert thread.topic_best() == {7: pytest.approx(0.342, abs=2e-3)}  # cos 70°, ann's thanks


def test_restricted_categories_are_left_out(conn: psycopg.Connection) -> None:
    insert_post(conn, 91, angle_vector(0), topic_id=9, post_number=1, category_id=5, username="x")
    insert_post(conn, 92, angle_vector(0), topic_id=9, post_number=2, category_id=5, username="y")
    describe_category(conn, 5, restricted=True)
    assert PostgresThreadIndex(single_connection(conn)).posts_of(angle_vector(0), [9]).posts == ()


def test_the_stage_cites_a_topics_answer_the_channels_did_not_find(conn: psycopg.Connection) -> None:
    # Only the asker's question (#1) and bob's chat (#2) are near the question; cid's answer (#3) is
    # far in cosine and shares no word with it (nor does the topic). Reading the whole topic brings #3
    # in, and a model that has learnt what an answer looks like (a reply the asker followed) cites it.
    solved_topic(conn)
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 2, "stage_topics": 1, "sources_k": 3})
    question = "dense mist"
    embedder = FakeEmbedder(model="test-model", table={question: angle_vector(0)})
    connections = single_connection(conn)
    index = PostgresPostIndex(connections, s, model="test-model", dimension=8)
    weights = {"cosine": 1.0, "first_post": -3.0, "asker_followed": 2.0}
    d = len(FEATURES)
    model = StageModel("m", FEATURES, tuple(weights.get(f, 0.0) for f in FEATURES), (0.0,) * d, (1.0,) * d)
    found = {}
    for name, threads in (("whole topics", PostgresThreadIndex(connections)), ("candidates only", None)):
        with Retriever(
            embedder, index, None, None, s, lexical=PostgresLexicalIndex(connections), threads=threads
        ) as retriever:
            retriever.use_stage_model(model)
            found[name] = retriever.retrieve(
                question, route=Route(keyword=True, ranker="stage"), exclude_post_ids=[75]
            )
    whole = found["whole topics"]
    assert whole.sources[0].post_number == 3
    assert [c.post_number for c in whole.candidates] == [3, 2, 4, 1]  # #5 excluded
    assert len(whole.stage_features) == 4
    assert whole.stage_features[0]["asker_followed"] == 1.0
    assert found["candidates only"].sources[0].post_number == 2  # the chat, without the topic read
