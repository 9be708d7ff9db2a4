from __future__ import annotations

import pytest

from worker.domain import Candidate
from worker.retrieval.aggregate import build_sources, dedupe_by_topic, excerpt, score_of


def cand(post_id: int, topic_id: int, *, post_number: int = 1, **extra: object) -> Candidate:
    base: dict[str, object] = {
        "topic_slug": f"slug-{topic_id}",
        "topic_title": f"Title {topic_id}",
        "text": f"Title {topic_id}\nCategory: c\n\nbody {post_id}",
    }
    base.update(extra)
    return Candidate(post_id=post_id, topic_id=topic_id, post_number=post_number, **base)  # type: ignore[arg-type]


def test_dedupe_keeps_the_best_ranked_post_of_each_topic() -> None:
    ranked = [cand(10, 1), cand(20, 2), cand(11, 1), cand(30, 3), cand(21, 2)]
    kept = dedupe_by_topic(ranked)
    assert [c.post_id for c in kept] == [10, 20, 30]


def test_sources_are_numbered_from_one_and_capped() -> None:
    ranked = [cand(i, topic_id=i // 2, post_number=i, logit=10.0 - i) for i in range(20)]
    sources = build_sources(ranked, 6)
    assert [s.n for s in sources] == [1, 2, 3, 4, 5, 6]
    # One per topic: posts 0, 2, 4, ... (the first of each pair), in ranked order.
    assert [s.post_id for s in sources] == [0, 2, 4, 6, 8, 10]
    assert [s.topic_id for s in sources] == [0, 1, 2, 3, 4, 5]
    assert sources[2].post_number == 4
    assert sources[0].slug == "slug-0"
    assert sources[0].title == "Title 0"
    assert sources[0].score == 10.0
    assert sources[0].excerpt == "body 0"  # the backfill's title/category head is not repeated


def test_fewer_candidates_than_sources_k() -> None:
    assert [s.n for s in build_sources([cand(1, 1), cand(2, 1)], 6)] == [1]
    assert build_sources([], 6) == []


def test_neighbour_context_is_attached_in_post_order() -> None:
    main = cand(5, 1, post_number=3)
    around = {5: [cand(4, 1, post_number=2), cand(6, 1, post_number=4)]}
    (source,) = build_sources([main], 6, context=around)
    assert source.context == ("#2: body 4", "#4: body 6")


def test_score_prefers_logit_then_fused_then_cosine() -> None:
    assert score_of(cand(1, 1, logit=-2.0, fused=0.03, cosine=0.8)) == -2.0
    assert score_of(cand(1, 1, fused=0.03, cosine=0.8)) == pytest.approx(0.03)
    assert score_of(cand(1, 1, cosine=0.8)) == pytest.approx(0.8)
    assert score_of(cand(1, 1)) is None


def test_post_body_and_excerpt() -> None:
    assert cand(1, 1, text="no head here").body == "no head here"
    assert cand(1, 1, text="Title 1\n\n  the body  ").body == "the body"
    assert excerpt("a  b\n c", 10) == "a b c"
    assert excerpt("alpha beta gamma delta", 12) == "alpha beta…"


def test_a_question_source_carries_its_topic_s_best_reply_and_a_reply_source_nothing() -> None:
    from worker.retrieval.aggregate import replies_for_questions

    question = cand(11, 1, text="How do I do it?", post_number=1)
    reply_low, reply_best = cand(13, 1, post_number=3), cand(12, 1, post_number=2)
    other = cand(21, 2, post_number=4)
    lone = cand(31, 3, post_number=1)
    ranked = [question, other, reply_best, reply_low, lone]
    fetched: list[tuple[int, int, int]] = []

    def fetch(topic_id: int, post_number: int, n: int) -> list[Candidate]:
        fetched.append((topic_id, post_number, n))
        return [cand(32, 3, post_number=2)]

    kept = [question, other, lone]
    got = replies_for_questions(kept, ranked, {}, fetch)
    assert {k: [c.post_id for c in v] for k, v in got.items()} == {11: [12], 31: [32]}
    assert fetched == [(3, 1, 1)]  # only the question with no reply among the candidates
    assert replies_for_questions(kept, ranked, {11: [reply_low], 31: [reply_low]}, fetch) == {}
