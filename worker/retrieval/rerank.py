"""Stage 2: the cross-encoder rerank of the fused candidates.

The reranker reads (question, topic title + the first ``excerpt_chars`` characters of the post) for
the first ``width`` candidates and returns raw logits. Any failure — the service down, a timeout, an
error body, a wrong number of scores — keeps the fused order: the answer then goes out in zone normal
with the fallback recorded, never fails for want of a reranker.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from worker.domain import Candidate
from worker.errors import CitebotError
from worker.protocols import Reranker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    """The candidates in their final order; ``fallback`` says why the fused order was kept, if it was."""

    candidates: tuple[Candidate, ...]
    applied: bool
    fallback: str | None = None


def rerank_text(title: str, text: str, excerpt_chars: int = 300) -> str:
    """What the cross-encoder reads for one post: the topic title, a blank line, the post's start.

    The one definition: production (``rerank_candidates``), the model server's calibration and the eval
    all build the pairs here, so the scorer is fitted on what it is later asked.
    """
    excerpt = " ".join(text.split())[:excerpt_chars]
    title = title.strip()
    return f"{title}\n\n{excerpt}" if title else excerpt


def rerank_candidates(
    reranker: Reranker,
    question: str,
    candidates: Sequence[Candidate],
    *,
    width: int = 25,
    excerpt_chars: int = 300,
) -> RerankOutcome:
    """Rerank the first ``width`` candidates by logit (stable on ties); the rest follow unscored."""
    head, tail = list(candidates[:width]), list(candidates[width:])
    if not head:
        return RerankOutcome((), applied=False, fallback=None)
    texts = [rerank_text(c.topic_title, c.body, excerpt_chars) for c in head]
    try:
        logits = reranker.rerank(question, texts)
    except (CitebotError, TimeoutError) as exc:
        log.warning("reranker %s failed, keeping the fused order: %s", reranker.name, type(exc).__name__)
        return RerankOutcome(tuple(candidates), applied=False, fallback=f"reranker failed: {exc}")
    if len(logits) != len(head) or not all(math.isfinite(x) for x in logits):
        log.warning("reranker %s returned unusable scores, keeping the fused order", reranker.name)
        return RerankOutcome(tuple(candidates), applied=False, fallback="reranker returned unusable scores")
    scored = [replace(c, logit=float(x)) for c, x in zip(head, logits, strict=True)]
    order = sorted(range(len(scored)), key=lambda i: (-logits[i], i))
    return RerankOutcome(tuple([scored[i] for i in order] + tail), applied=True)
