from __future__ import annotations

import pytest

from tests.worker.retrieval.doubles import CannedSearch, hit
from worker.domain import Candidate
from worker.errors import ServiceUnavailableError, ValidationError
from worker.retrieval.keyword import DocFrequencies, TermSelector, hits_to_candidates, keyword_search
from worker.retrieval.rerank import rerank_candidates, rerank_text
from worker.testing.models import FakeReranker

STATS = DocFrequencies(total=100, counts={"shadows": 10, "directional": 5, "softer": 2})
QUESTION = "How can I make directional shadows softer?"


def test_keyword_search_retries_shorter_until_something_comes_back() -> None:
    search = CannedSearch({"shadows": [hit(7, 70), hit(8, 80)]})
    result = keyword_search(search, TermSelector(3, stats=lambda: STATS), QUESTION)
    # Nothing for any query: all three tried, most specific first, the most common word dropped first.
    assert search.queries == ["directional shadows softer", "directional softer", "softer"]
    assert result.candidates == ()
    assert result.query is None

    search = CannedSearch({"directional softer": [hit(7, 70), hit(8, 80), hit(9, 70)]})
    result = keyword_search(search, TermSelector(3, stats=lambda: STATS), QUESTION)
    assert search.queries == ["directional shadows softer", "directional softer"]
    assert result.query == "directional softer"
    # One post per topic, ranked from 1.
    assert [(c.post_id, c.keyword_rank) for c in result.candidates] == [(7, 1), (8, 2)]
    assert result.candidates[0].text == "blurb of post 7"


def test_keyword_search_drops_excluded_posts_before_ranking() -> None:
    search = CannedSearch(default=[hit(1, 10), hit(2, 20), hit(3, 30)])
    result = keyword_search(search, TermSelector(1), "shadows", exclude_post_ids=[1])
    assert [(c.post_id, c.keyword_rank) for c in result.candidates] == [(2, 1), (3, 2)]


def test_keyword_errors_propagate() -> None:
    search = CannedSearch()
    search.fail_with = ServiceUnavailableError("down", service="discourse")
    with pytest.raises(ServiceUnavailableError):
        keyword_search(search, TermSelector(2), "directional shadows")


def test_hits_to_candidates_keeps_metadata() -> None:
    (c,) = hits_to_candidates([hit(5, 50, post_number=3, category_id=9)])
    assert (c.post_id, c.topic_id, c.post_number, c.category_id, c.topic_slug) == (5, 50, 3, 9, "topic-50")


def cand(post_id: int, body: str) -> Candidate:
    return Candidate(
        post_id=post_id,
        topic_id=post_id,
        post_number=1,
        topic_slug="s",
        topic_title=f"Title {post_id}",
        text=f"Title {post_id}\nTags: a, b\n\n{body}",
        fused=1.0 / (60 + post_id),
    )


def by_number(text: str) -> float:
    """The logit is the number written in the post's body: 'score=3.5'."""
    return float(text.split("score=")[1].split()[0])


def test_rerank_text_is_title_and_the_first_excerpt_chars_of_the_post() -> None:
    long_body = "word " * 200
    c = cand(1, long_body)
    text = rerank_text(c.topic_title, c.body, 300)
    title, body = text.split("\n\n")
    assert title == "Title 1"
    assert len(body) == 300
    assert "Tags" not in text


def test_rerank_text_collapses_whitespace_and_drops_an_empty_title() -> None:
    built = rerank_text("How to X?", "First   line\nsecond line " + "x" * 400, 30)
    assert built == "How to X?\n\nFirst line second line xxxxxxx"
    assert rerank_text("", "just text") == "just text"


def test_rerank_orders_by_logit_and_leaves_the_tail_unscored() -> None:
    cands = [cand(1, "score=-5"), cand(2, "score=2"), cand(3, "score=0.5"), cand(4, "score=9")]
    reranker = FakeReranker(score_fn=lambda _query, text: by_number(text))
    outcome = rerank_candidates(reranker, "q", cands, width=3)
    assert outcome.applied
    assert outcome.fallback is None
    assert [c.post_id for c in outcome.candidates] == [2, 3, 1, 4]
    assert [c.logit for c in outcome.candidates] == [2.0, 0.5, -5.0, None]
    assert len(reranker.calls[0][1]) == 3


def test_rerank_failure_keeps_the_fused_order() -> None:
    cands = [cand(1, "score=-5"), cand(2, "score=2")]
    for error in (ServiceUnavailableError("timeout", service="tei"), ValidationError("413", service="tei")):
        reranker = FakeReranker(score_fn=lambda _query, text: by_number(text))
        reranker.fail_with = error
        outcome = rerank_candidates(reranker, "q", cands)
        assert not outcome.applied
        assert outcome.fallback is not None
        assert "reranker failed" in outcome.fallback
        assert [c.post_id for c in outcome.candidates] == [1, 2]
        assert all(c.logit is None for c in outcome.candidates)


def test_rerank_with_unusable_scores_keeps_the_fused_order() -> None:
    cands = [cand(1, "score=1"), cand(2, "score=nan")]
    outcome = rerank_candidates(FakeReranker(score_fn=lambda _query, text: by_number(text)), "q", cands)
    assert not outcome.applied
    assert outcome.fallback == "reranker returned unusable scores"
    assert [c.post_id for c in outcome.candidates] == [1, 2]
