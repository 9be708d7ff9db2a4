"""The Retriever over the real PostgresPostIndex (8-d test space) and in-memory model/search doubles."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.worker.retrieval.doubles import (
    CannedSearch,
    angle_vector,
    describe_category,
    forum_of,
    hit,
    insert_post,
)
from worker.domain import ForumTopic
from worker.errors import IndexMismatchError, PermanentError, ServiceUnavailableError, TransientError
from worker.generation.prompt import build_prompt
from worker.retrieval.keyword import TermSelector
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.route import Route
from worker.settings import RetrievalSettings
from worker.testing.forum import FakeForum
from worker.testing.models import FakeEmbedder, FakeReranker

pytestmark = pytest.mark.integration

QUESTION = "How do I soften directional shadows?"


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def settings(**overrides: object) -> RetrievalSettings:
    return RetrievalSettings.model_validate({"recall_k": 10, "sources_k": 3, **overrides})


def make_index(conn: psycopg.Connection, s: RetrievalSettings) -> PostgresPostIndex:
    return PostgresPostIndex(single_connection(conn), s, model="test-model", dimension=8)


def fill(conn: psycopg.Connection) -> None:
    """Topic t has posts at angles near 10·t degrees from the question's vector (e1)."""
    for topic in range(1, 6):
        for n in (1, 2):
            post_id = topic * 10 + n
            insert_post(
                conn,
                post_id,
                angle_vector(10 * topic + n),
                topic_id=topic,
                post_number=n,
                text=f"post {post_id} score={10 - 3 * topic - n}",
            )


def by_number(text: str) -> float:
    return float(text.split("score=")[1].split()[0])


def test_posts_pipeline_ranks_dedupes_and_numbers_sources(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    with Retriever(embedder, make_index(conn, s), None, None, s) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(ranker="fused"))
    assert result.grain == "post"
    assert result.zone == "normal"
    assert not result.legacy
    assert [src.post_id for src in result.sources] == [11, 21, 31]  # best post of each topic
    assert [src.n for src in result.sources] == [1, 2, 3]
    assert embedder.calls == [((QUESTION,), "query")]
    assert [c.post_id for c in result.candidates][:4] == [11, 12, 21, 22]
    names = [st.name for st in result.trace.stages]
    assert names == ["index_check", "embed", "recall", "fuse", "aggregate"]
    recall = result.trace.get("recall")
    assert recall is not None
    assert recall.counts == {"k": 10, "rows": 10}
    assert result.trace.fallbacks == []
    json.loads(result.trace.to_json())


def test_keyword_hits_are_fused_given_their_indexed_text_and_dropped_when_not_indexed(
    conn: psycopg.Connection,
) -> None:
    fill(conn)
    insert_post(conn, 99, angle_vector(179), topic_id=9, text="far away in vector space, found by words")
    describe_category(conn, 77, restricted=True)
    s = settings()
    search = CannedSearch(
        default=[hit(99, 9), hit(31, 3), hit(555, 55, category_id=77), hit(556, 56, category_id=8)]
    )
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    with Retriever(embedder, make_index(conn, s), search, None, s) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(keyword=True, ranker="fused"))
    ids = [c.post_id for c in result.candidates]
    assert 99 in ids  # recalled by the keyword channel only
    assert 555 not in ids  # a keyword hit in a category restricted now is dropped
    # Not in the index (a question to the bot, an open question, the bot's own reply): not evidence.
    assert 556 not in ids
    by_id = {c.post_id: c for c in result.candidates}
    assert by_id[99].text.endswith("found by words")  # the indexed text replaced the blurb
    hydrate = result.trace.get("hydrate")
    assert hydrate is not None
    assert hydrate.counts["dropped"] == 2
    # Post 31 is rank 5 in vectors and 2 in keywords: it passes post 12 (rank 2 in vectors only).
    assert by_id[31].fused == pytest.approx(1 / 65 + 1 / 62)
    assert ids.index(31) < ids.index(12)
    assert search.queries  # the channel ran with the question's distinctive words
    assert all("how" not in q.split() for q in search.queries)


def test_rerank_sets_the_order_and_the_zone(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    reranker = FakeReranker(score_fn=lambda _query, text: -by_number(text))  # reverse the vector order
    with Retriever(embedder, make_index(conn, s), None, reranker, s) as retriever:
        result = retriever.retrieve(QUESTION)
    assert [src.topic_id for src in result.sources] == [5, 4, 3]
    top = result.candidates[0]
    assert top.logit == pytest.approx(-by_number(top.text))
    assert result.zone == "normal"  # top logit 7 - 0 > 0
    query, texts = reranker.calls[0]
    assert query == QUESTION
    assert len(texts) == 10
    assert texts[0].startswith("Topic 1\n\npost 11")

    weak = FakeReranker(score_fn=lambda _query, text: -2.0)
    with Retriever(embedder, make_index(conn, s), None, weak, s) as retriever:
        assert retriever.retrieve(QUESTION).zone == "weak"
    abstain = FakeReranker(score_fn=lambda _query, text: -4.5)
    with Retriever(embedder, make_index(conn, s), None, abstain, s) as retriever:
        assert retriever.retrieve(QUESTION).zone == "abstain"


def test_no_answer_cites_a_source_below_the_floor_of_its_zone(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    # Topic 3's post scores 2.0, the others -1.0 (weak by the seed's -4 / 0): a normal-zone answer.
    reranker = FakeReranker(score_fn=lambda _query, text: 2.0 if text.startswith("Topic 3\n") else -1.0)
    with Retriever(embedder, make_index(conn, s), None, reranker, s) as retriever:
        result = retriever.retrieve(QUESTION)
        unranked = retriever.retrieve(QUESTION, route=Route(keyword=True, ranker="fused"))
    assert (result.zone, result.floor) == ("normal", 0.0)
    assert [src.topic_id for src in result.sources] == [3, 1, 2]  # the eval still sees every source
    prompt = build_prompt(QUESTION, result.sources, result.zone, floor=result.floor)
    assert [src.topic_id for src in prompt.sources_used] == [3]
    assert "[[2]]" not in prompt.messages[1]["content"]  # not shown, so no generator can cite it
    assert unranked.floor is None  # no calibrated score decided the zone: nothing to hold the sources to
    with Retriever(
        embedder, make_index(conn, s), None, FakeReranker(score_fn=lambda _query, t: -2.0), s
    ) as retriever:
        assert retriever.retrieve(QUESTION).floor == -4.0  # weak zone: the abstain threshold


def test_reranker_down_keeps_fused_order_zone_normal(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    reranker = FakeReranker(score_fn=lambda _query, text: -9.0)
    reranker.fail_with = ServiceUnavailableError("timed out", service="tei")
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    with Retriever(embedder, make_index(conn, s), None, reranker, s) as retriever:
        result = retriever.retrieve(QUESTION)
    assert result.zone == "normal"
    assert [src.post_id for src in result.sources] == [11, 21, 31]
    assert [f["stage"] for f in result.trace.fallbacks] == ["rerank"]
    assert "timed out" in result.trace.fallbacks[0]["reason"]


def test_legacy_when_the_posts_pipeline_is_off(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(41, 4), hit(42, 4), hit(21, 2)])
    forum = forum_of(2, 4)
    with Retriever(embedder, make_index(conn, s), search, None, s, topics=forum) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(posts=False))
    assert result.legacy_reason == "posts pipeline off"
    assert result.grain == "topic"
    assert result.zone == "normal"
    # each hit topic read as the reader; its answer (#2), not its question (#1), is the source
    assert [(src.post_id, src.post_number) for src in result.sources] == [(42, 2), (22, 2)]
    assert result.sources[0].context == ("#1: question of topic 4?",)
    assert sorted(forum.topic_reads) == [2, 4]
    assert embedder.calls == []  # nothing of the new pipeline ran
    assert result.trace.fallbacks == [{"stage": "retrieval", "reason": "legacy: posts pipeline off"}]


def test_legacy_abstains_when_no_hit_topic_has_an_answer(conn: psycopg.Connection) -> None:
    """Search hits are other members' questions; with no reply to cite the path abstains."""
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(41, 4), hit(21, 2)])
    forum = forum_of(2, 4, answered=False)
    with Retriever(embedder, make_index(conn, s), search, None, s, topics=forum) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(posts=False))
    assert (result.zone, result.sources) == ("abstain", ())
    stage = next(st for st in result.trace.stages if st.name == "legacy_answers")
    assert stage.counts == {"topics": 2, "answered": 0, "unreadable": 0}


def test_legacy_without_a_topic_reader_never_cites_a_question(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(41, 4), hit(22, 2, post_number=2)])
    with Retriever(embedder, make_index(conn, s), search, None, s) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(posts=False))
    assert [src.post_id for src in result.sources] == [22]


def test_legacy_retries_when_no_hit_topic_can_be_read(conn: psycopg.Connection) -> None:
    """The reader's reads all fail transiently: a TransientError (the job is retried), not an "I don't
    know" posted because the forum hiccuped."""
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(41, 4)])

    class DownForum(FakeForum):
        def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic:
            raise ServiceUnavailableError("503", service="discourse", status=503)

    retriever = Retriever(embedder, make_index(conn, s), search, None, s, topics=DownForum())
    with retriever, pytest.raises(TransientError):
        retriever.retrieve(QUESTION, route=Route(posts=False))


def test_legacy_keeps_only_hits_whose_topic_the_index_holds_as_citable(conn: psycopg.Connection) -> None:
    """Issue 32: with the flag off the index still knows what is public; a hit of a topic it does not
    hold (a staff category, a whisper's topic, a PM an admin search found) is never a source."""
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(91, 9), hit(41, 4), hit(77, 7), hit(21, 2)])
    forum = forum_of(9, 4, 7, 2)
    with Retriever(embedder, make_index(conn, s), search, None, s, topics=forum) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(posts=False))
    assert [src.topic_id for src in result.sources] == [4, 2]
    assert sorted(forum.topic_reads) == [2, 4]  # the others are never read
    stage = next(st for st in result.trace.stages if st.name == "legacy_citable")
    assert stage.counts == {"hits": 4, "kept": 2}


def test_legacy_over_an_empty_index_keeps_the_readers_hits(conn: psycopg.Connection) -> None:
    """Nothing to intersect with: the hits are the reader's (anonymous) search, re-read before posting."""
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(91, 9), hit(41, 4)])
    with Retriever(embedder, make_index(conn, s), search, None, s, topics=forum_of(9, 4)) as retriever:
        result = retriever.retrieve(QUESTION)
    assert result.legacy_reason == "index empty"
    assert [src.topic_id for src in result.sources] == [9, 4]


def test_legacy_when_the_index_is_empty_and_the_check_is_cached(conn: psycopg.Connection) -> None:
    s = settings(index_check_ttl_s=60)
    now = [1000.0]
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    search = CannedSearch(default=[hit(41, 4)])
    retriever = Retriever(embedder, make_index(conn, s), search, None, s, clock=lambda: now[0])
    with retriever:
        first = retriever.retrieve(QUESTION)
        assert first.legacy_reason == "index empty"
        fill(conn)
        now[0] += 30  # still cached: legacy again, no new check
        assert retriever.retrieve(QUESTION).legacy_reason == "index empty"
        now[0] += 31  # cache expired: the filled index is seen
        later = retriever.retrieve(QUESTION)
    assert later.legacy_reason is None
    assert later.grain == "post"
    assert embedder.calls == [((QUESTION,), "query")]


@pytest.mark.parametrize(
    "error",
    [ServiceUnavailableError("connection refused", service="tei"), PermanentError("422", service="tei")],
)
def test_legacy_when_embeddings_fail(conn: psycopg.Connection, error: Exception) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model")
    embedder.fail_with = error  # type: ignore[assignment]
    search = CannedSearch(default=[hit(41, 4)])
    with Retriever(embedder, make_index(conn, s), search, None, s, topics=forum_of(4)) as retriever:
        result = retriever.retrieve(QUESTION)
    assert result.grain == "topic"
    assert result.legacy_reason is not None
    assert type(error).__name__ in result.legacy_reason
    assert [src.post_id for src in result.sources] == [42]
    assert len(search.queries) >= 1  # the keyword branch that already ran is reused, not rerun
    embed = result.trace.get("embed")
    assert embed is not None
    assert embed.error == type(error).__name__


def test_index_of_another_model_fails_loudly(conn: psycopg.Connection) -> None:
    s = settings()
    with pytest.raises(IndexMismatchError):
        Retriever(FakeEmbedder(model="other"), make_index(conn, s), None, None, s)
    conn.execute("UPDATE index_meta SET model = 'changed-since'")
    with pytest.raises(IndexMismatchError, match="changed-since"):
        make_index(conn, s).check()


def test_neighbours_travel_as_context(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    with Retriever(embedder, make_index(conn, s), None, None, s) as retriever:
        plain = retriever.retrieve(QUESTION, route=Route(ranker="fused"))
        around = retriever.retrieve(QUESTION, route=Route(ranker="fused", neighbours=1))
    # Every source here is its topic's question (post #1): without neighbours it still carries the
    # topic's best-ranked reply, the post that answers it (dedupe kept only the question).
    assert [src.context for src in plain.sources] == [
        ("#2: post 12 score=5",),
        ("#2: post 22 score=2",),
        ("#2: post 32 score=-1",),
    ]
    assert around.sources[0].context == ("#2: post 12 score=5",)
    assert [src.post_id for src in around.sources] == [src.post_id for src in plain.sources]


def test_keyword_runs_concurrently_with_embed_and_recall(conn: psycopg.Connection) -> None:
    """Each branch waits for the other to have started: this completes only if they overlap."""
    fill(conn)
    s = settings()
    keyword_started = threading.Event()
    embed_started = threading.Event()
    waited: dict[str, bool] = {}

    def in_embed() -> None:
        embed_started.set()
        waited["embed"] = keyword_started.wait(5)

    def in_search() -> None:
        keyword_started.set()
        waited["keyword"] = embed_started.wait(5)

    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)}, before=in_embed)
    search = CannedSearch(default=[hit(31, 3)], before=in_search)
    with Retriever(embedder, make_index(conn, s), search, None, s, terms=TermSelector(2)) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(keyword=True, ranker="fused"))
    assert waited == {"embed": True, "keyword": True}
    kw, embed, recall, fuse = (result.trace.get(n) for n in ("keyword", "embed", "recall", "fuse"))
    assert kw is not None
    assert embed is not None
    assert recall is not None
    assert fuse is not None
    # In the trace: the keyword stage starts before embed ends, and embed starts before keyword ends.
    assert kw.start_ms < embed.start_ms + embed.duration_ms
    assert embed.start_ms < kw.start_ms + kw.duration_ms
    # Fusion waits for both branches.
    assert fuse.start_ms >= kw.start_ms + kw.duration_ms
    assert fuse.start_ms >= recall.start_ms + recall.duration_ms


def test_keyword_failure_is_a_fallback_not_an_error(conn: psycopg.Connection) -> None:
    fill(conn)
    s = settings()
    search = CannedSearch()
    search.fail_with = ServiceUnavailableError("429", service="discourse")
    embedder = FakeEmbedder(model="test-model", table={QUESTION: angle_vector(0)})
    with Retriever(embedder, make_index(conn, s), search, None, s) as retriever:
        result = retriever.retrieve(QUESTION, route=Route(keyword=True, ranker="fused"))
    assert result.grain == "post"
    assert [src.post_id for src in result.sources] == [11, 21, 31]
    assert [f["stage"] for f in result.trace.fallbacks] == ["keyword"]
