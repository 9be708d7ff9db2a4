"""Reciprocal rank fusion of the vector and keyword rankings.

score(post) = Σ over rankings of 1 / (k + rank), rank counted from 1; a post absent from a ranking
gets nothing from it. RRF needs no score calibration between channels, which is why it fuses cosine
distances with Discourse's ``ts_rank_cd`` order. Ties are broken deterministically: best single rank,
then the earlier ranking (vectors first), then the smaller post id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from worker.domain import Candidate


def fuse_rrf(
    rankings: Sequence[Sequence[Candidate]], k: int = 60, weights: Sequence[float] | None = None
) -> list[Candidate]:
    """Fuse best-first rankings keyed by post id; each result carries ``fused`` and every rank it had.

    ``weights`` (one per ranking, default 1) scale each ranking's 1 / (k + rank): weighted RRF.

    When a post appears in several rankings, the first ranking's candidate provides its text (the vector
    channel's full post text beats a search blurb); ranks and cosine are merged from all of them.
    """
    if k < 1:
        raise ValueError("the RRF constant k must be >= 1")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings) or any(w < 0 for w in weights):
        raise ValueError("one non-negative weight per ranking")
    merged: dict[int, Candidate] = {}
    scores: dict[int, float] = {}
    best: dict[int, tuple[int, int]] = {}  # post id -> (best rank, index of the ranking that gave it)
    for which, ranking in enumerate(rankings):
        seen: set[int] = set()
        for rank, cand in enumerate(ranking, start=1):
            if cand.post_id in seen:  # a ranking counts a post once, at its best rank
                continue
            seen.add(cand.post_id)
            scores[cand.post_id] = scores.get(cand.post_id, 0.0) + weights[which] / (k + rank)
            best[cand.post_id] = min(best.get(cand.post_id, (rank, which)), (rank, which))
            merged[cand.post_id] = _merge(merged.get(cand.post_id), cand)
    order = sorted(merged, key=lambda pid: (-scores[pid], best[pid], pid))
    return [replace(merged[pid], fused=scores[pid]) for pid in order]


def _merge(kept: Candidate | None, new: Candidate) -> Candidate:
    if kept is None:
        return new
    return replace(
        kept,
        cosine=kept.cosine if kept.cosine is not None else new.cosine,
        vector_rank=kept.vector_rank if kept.vector_rank is not None else new.vector_rank,
        keyword_rank=kept.keyword_rank if kept.keyword_rank is not None else new.keyword_rank,
        lexical=kept.lexical if kept.lexical is not None else new.lexical,
        lexical_rank=kept.lexical_rank if kept.lexical_rank is not None else new.lexical_rank,
        category_id=kept.category_id if kept.category_id is not None else new.category_id,
    )
