"""Ranking metrics on hand-made rankings (values worked out by hand in the comments)."""

from __future__ import annotations

import math

import pytest

from eval.evaluation.metrics import dedupe, first_rank, hit_at, mean, mrr_at, ndcg_at, percentile, recall_hit


def test_first_rank_counts_a_repeated_id_once() -> None:
    # topics of a post ranking: 7 appears twice, so the gold 9 is the 3rd distinct topic
    assert dedupe([7, 7, 8, 9]) == [7, 8, 9]
    assert first_rank([7, 7, 8, 9], {9}) == 3
    assert first_rank([1, 2], {9}) is None


@pytest.mark.parametrize(
    ("ranking", "k", "expected"),
    [([5, 1, 2], 1, 1.0), ([1, 5, 2], 1, 0.0), ([1, 2, 3, 4, 5], 5, 1.0), ([1, 2, 3, 4, 6, 5], 5, 0.0)],
)
def test_hit_at_k(ranking: list[int], k: int, expected: float) -> None:
    assert hit_at(ranking, {5}, k) == expected


def test_mrr_is_the_reciprocal_of_the_first_relevant_rank_within_k() -> None:
    assert mrr_at([3, 9, 5], {5, 9}, 10) == pytest.approx(1 / 2)
    assert mrr_at([1] * 3 + list(range(10, 20)) + [5], {5}, 10) == 0.0  # 5 is 12th distinct
    assert mrr_at([5], {5}, 10) == 1.0


def test_ndcg_with_one_and_two_relevant_ids() -> None:
    # one relevant at rank 3: (1/log2 4) / 1 = 0.5
    assert ndcg_at([1, 2, 5], {5}, 10) == pytest.approx(0.5)
    # two relevant at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2 3)
    assert ndcg_at([5, 1, 6], {5, 6}, 10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at([5, 6], {5, 6}, 10) == pytest.approx(1.0)
    assert ndcg_at([1, 2], {5}, 10) == 0.0
    assert ndcg_at([1, 5], set(), 10) == 0.0


def test_ndcg_ignores_relevant_ids_beyond_k() -> None:
    assert ndcg_at([1, 2, 5], {5}, 2) == 0.0


def test_recall_of_the_candidate_set() -> None:
    candidates = list(range(100, 125))  # 25 candidates
    assert recall_hit(candidates, {124}) == 1.0
    assert recall_hit(candidates[:24], {124}) == 0.0


def test_percentile_and_mean() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([], 50) == 0.0
    assert mean([1.0, 0.0, 0.0, 1.0]) == 0.5
