"""Stage 3: from ranked candidates to the numbered sources ``[[1]]``…``[[n]]`` the LLM cites.

Dedupe by topic (the first — best-ranked — post of each topic wins), keep ``sources_k``, number them
from 1. Optional neighbour posts (± n post numbers in the same topic) travel as context: they help the
LLM read a terse answer, but they are never citable on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from worker.domain import Candidate, Source

EXCERPT_CHARS = 1200


def dedupe_by_topic(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Keep the first candidate of each topic, in the given (best-first) order."""
    seen: set[int] = set()
    kept: list[Candidate] = []
    for cand in candidates:
        if cand.topic_id in seen:
            continue
        seen.add(cand.topic_id)
        kept.append(cand)
    return kept


def excerpt(text: str, limit: int) -> str:
    """At most ``limit`` characters, whitespace collapsed, cut at a word boundary with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0]
    return cut + "…"


def score_of(cand: Candidate) -> float | None:
    """The score that ordered a candidate: its rerank logit, else its fused RRF score, else its cosine."""
    for value in (cand.logit, cand.fused, cand.cosine):
        if value is not None:
            return value
    return None


def build_sources(
    candidates: Sequence[Candidate],
    sources_k: int,
    *,
    excerpt_chars: int = EXCERPT_CHARS,
    context: Mapping[int, Sequence[Candidate]] | None = None,
) -> list[Source]:
    """Numbered sources from best-first candidates: deduped by topic, ``sources_k`` at most.

    ``context`` maps a post id to its neighbour posts (see ``neighbours_for``).
    """
    sources = []
    for n, cand in enumerate(dedupe_by_topic(candidates)[:sources_k], start=1):
        around = (context or {}).get(cand.post_id, ())
        sources.append(
            Source(
                n=n,
                post_id=cand.post_id,
                topic_id=cand.topic_id,
                post_number=cand.post_number,
                slug=cand.topic_slug,
                title=cand.topic_title,
                excerpt=excerpt(cand.body, excerpt_chars),
                score=score_of(cand),
                context=tuple(f"#{c.post_number}: {excerpt(c.body, excerpt_chars // 2)}" for c in around),
            )
        )
    return sources


def replies_for_questions(
    kept: Sequence[Candidate],
    ranked: Sequence[Candidate],
    context: Mapping[int, Sequence[Candidate]],
    fetch: Callable[[int, int, int], Sequence[Candidate]] | None = None,
) -> dict[int, list[Candidate]]:
    """Context for each source that is its topic's question (post #1) and has none yet: the topic's
    best-ranked reply among ``ranked``, else (with ``fetch``) the post after it.

    A question post often wins its topic (it reads like the member's question), and dedupe then drops
    the reply that answers it; the reply travels as the question's context, so the answer is in the
    prompt, and the offline generator quotes it instead of the question.
    """
    out: dict[int, list[Candidate]] = {}
    for cand in kept:
        if cand.post_number != 1 or context.get(cand.post_id):
            continue
        reply = next((r for r in ranked if r.topic_id == cand.topic_id and r.post_number > 1), None)
        if reply is not None:
            out[cand.post_id] = [reply]
        elif fetch is not None:
            after = [r for r in fetch(cand.topic_id, 1, 1) if r.post_number > 1]
            if after:
                out[cand.post_id] = after[:1]
    return out


def neighbours_for(
    candidates: Sequence[Candidate], n: int, fetch: Callable[[int, int, int], Sequence[Candidate]]
) -> dict[int, list[Candidate]]:
    """``fetch(topic_id, post_number, n)`` for each candidate: post id → its neighbours."""
    if n <= 0:
        return {}
    return {c.post_id: list(fetch(c.topic_id, c.post_number, n)) for c in candidates}
