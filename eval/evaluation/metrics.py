"""Ranking metrics with binary relevance: hit@k, MRR@k, nDCG@k, recall of a candidate set.

A ranking is a sequence of ids (topic ids or post ids), best first; ``relevant`` is the gold set. Ids
repeated in a ranking count at their first position only (a topic ranking built from posts repeats
topics).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence


def dedupe(ranking: Sequence[int]) -> list[int]:
    """The ranking with each id at its first position only."""
    seen: set[int] = set()
    out = []
    for item in ranking:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def first_rank(ranking: Sequence[int], relevant: Collection[int]) -> int | None:
    """1-based position of the first relevant id, or None."""
    for i, item in enumerate(dedupe(ranking), 1):
        if item in relevant:
            return i
    return None


def hit_at(ranking: Sequence[int], relevant: Collection[int], k: int) -> float:
    rank = first_rank(ranking, relevant)
    return 1.0 if rank is not None and rank <= k else 0.0


def mrr_at(ranking: Sequence[int], relevant: Collection[int], k: int) -> float:
    rank = first_rank(ranking, relevant)
    return 1.0 / rank if rank is not None and rank <= k else 0.0


def ndcg_at(ranking: Sequence[int], relevant: Collection[int], k: int) -> float:
    """Binary-relevance nDCG: Σ 1/log2(i+1) over relevant ids in the first k, over the ideal."""
    if not relevant:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, item in enumerate(dedupe(ranking)[:k], 1) if item in relevant)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(set(relevant)), k) + 1))
    return dcg / ideal


def recall_hit(candidates: Collection[int], relevant: Collection[int]) -> float:
    """1 when any relevant id is among ``candidates`` (the recall stage's set), else 0."""
    return 1.0 if any(c in relevant for c in candidates) else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (linear interpolation), 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
