"""The keyword channel: Discourse full-text search on the question's distinctive words.

Discourse returns one post per topic (its best), terms ANDed; we send the most specific query first
and retry with fewer words while nothing comes back. Hits become ranked ``Candidate``s whose text is
the search blurb (the pipeline swaps in the indexed post text when it has it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.domain import Candidate, SearchHit
from worker.protocols import KeywordSearch
from worker.retrieval.terms import TermSelector


@dataclass(frozen=True, slots=True)
class KeywordResult:
    """The hits, best first, and the queries tried (the last one produced the hits, if any did)."""

    candidates: tuple[Candidate, ...]
    queries: tuple[str, ...]

    @property
    def query(self) -> str | None:
        return self.queries[-1] if self.candidates and self.queries else None


def hits_to_candidates(hits: Sequence[SearchHit]) -> list[Candidate]:
    """Best-first candidates, one per topic (Discourse already groups; a second hit of a topic is dropped)."""
    seen: set[int] = set()
    out: list[Candidate] = []
    for hit in hits:
        if hit.topic_id in seen:
            continue
        seen.add(hit.topic_id)
        out.append(
            Candidate(
                post_id=hit.post_id,
                topic_id=hit.topic_id,
                post_number=hit.post_number,
                topic_slug=hit.topic_slug,
                topic_title=hit.topic_title,
                text=hit.blurb,
                category_id=hit.category_id,
                keyword_rank=len(out) + 1,
            )
        )
    return out


def keyword_search(
    search: KeywordSearch,
    selector: TermSelector,
    question: str,
    *,
    limit: int = 25,
    exclude_post_ids: Sequence[int] = (),
) -> KeywordResult:
    """Run the queries from most to least specific until one returns hits; errors propagate."""
    tried: list[str] = []
    excluded = set(exclude_post_ids)
    for query in selector.keyword_queries(question):
        tried.append(query)
        hits = [h for h in search.search(query, limit=limit) if h.post_id not in excluded]
        if hits:
            return KeywordResult(tuple(hits_to_candidates(hits)[:limit]), tuple(tried))
    return KeywordResult((), tuple(tried))
