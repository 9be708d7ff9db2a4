from __future__ import annotations

import pytest

from worker.domain import Candidate
from worker.retrieval.fusion import fuse_rrf


def cand(post_id: int, *, topic_id: int | None = None, text: str = "", **scores: object) -> Candidate:
    return Candidate(
        post_id=post_id,
        topic_id=topic_id if topic_id is not None else post_id,
        post_number=1,
        topic_slug="s",
        topic_title="t",
        text=text or f"text {post_id}",
        **scores,  # type: ignore[arg-type]
    )


def test_scores_are_the_sum_of_reciprocal_ranks() -> None:
    vector = [cand(1), cand(2), cand(3)]
    keyword = [cand(3), cand(4)]
    fused = fuse_rrf([vector, keyword], k=60)
    by_id = {c.post_id: c.fused for c in fused}
    assert by_id[1] == pytest.approx(1 / 61)
    assert by_id[2] == pytest.approx(1 / 62)
    assert by_id[3] == pytest.approx(1 / 63 + 1 / 61)
    assert by_id[4] == pytest.approx(1 / 62)
    # post 3 is in both lists and wins; 1 next; 2 and 4 tie at 1/62.
    assert [c.post_id for c in fused][:2] == [3, 1]


def test_ties_break_on_the_earlier_ranking_then_the_post_id() -> None:
    # 2 (vector rank 2) and 4 (keyword rank 2) tie at 1/62: the vector ranking comes first.
    fused = fuse_rrf([[cand(1), cand(2)], [cand(3), cand(4)]], k=60)
    assert [c.post_id for c in fused] == [1, 3, 2, 4]
    # Same input, rankings swapped: the order follows the first ranking again.
    swapped = fuse_rrf([[cand(3), cand(4)], [cand(1), cand(2)]], k=60)
    assert [c.post_id for c in swapped] == [3, 1, 4, 2]
    # Three rankings, one post each, equal scores: the order of the rankings decides, not the ids.
    assert [c.post_id for c in fuse_rrf([[cand(9)], [cand(5)], [cand(7)]])] == [9, 5, 7]


def test_k_changes_the_weight_of_the_head() -> None:
    a = [cand(1), cand(2), cand(3)]
    b = [cand(3), cand(2), cand(1)]
    # With k=1, rank 1 weighs 1/2 against 1/4 for rank 3; post 2 (rank 2 twice) gets 2/3 < 1/2 + 1/4.
    small_k = fuse_rrf([a, b], k=1)
    assert [c.post_id for c in small_k] == [1, 3, 2]
    assert small_k[0].fused == pytest.approx(1 / 2 + 1 / 4)


def test_merge_keeps_the_first_text_and_every_rank() -> None:
    vector = [cand(1, text="full post text", cosine=0.9, vector_rank=1)]
    keyword = [cand(1, text="blurb", keyword_rank=1, category_id=7)]
    (only,) = fuse_rrf([vector, keyword])
    assert only.text == "full post text"
    assert only.cosine == 0.9
    assert only.vector_rank == 1
    assert only.keyword_rank == 1
    assert only.category_id == 7


def test_a_post_counts_once_per_ranking() -> None:
    fused = fuse_rrf([[cand(1), cand(1), cand(2)]], k=60)
    assert [c.post_id for c in fused] == [1, 2]
    assert fused[0].fused == pytest.approx(1 / 61)
    assert fused[1].fused == pytest.approx(1 / 63)


def test_empty_and_invalid_inputs() -> None:
    assert fuse_rrf([]) == []
    assert fuse_rrf([[], []]) == []
    with pytest.raises(ValueError, match="k must be"):
        fuse_rrf([[cand(1)]], k=0)


def test_weighted_rrf_scales_each_ranking() -> None:
    vector = [cand(1), cand(2)]
    lexical = [cand(2, lexical=3.0, lexical_rank=1), cand(3, lexical=1.0, lexical_rank=2)]
    fused = fuse_rrf([vector, lexical], k=60, weights=[1.0, 0.5])
    by_id = {c.post_id: c for c in fused}
    assert by_id[2].fused == pytest.approx(1 / 62 + 0.5 / 61)
    assert by_id[3].fused == pytest.approx(0.5 / 62)
    assert by_id[2].lexical == 3.0  # merged from the lexical channel into the vector candidate
    assert by_id[2].lexical_rank == 1
    with pytest.raises(ValueError, match="weight"):
        fuse_rrf([vector, lexical], weights=[1.0])
