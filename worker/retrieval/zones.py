"""Evidence zones from the top-1 cross-encoder logit.

``< abstain_below`` → abstain · ``[abstain_below, weak_below)`` → weak · ``>= weak_below`` → normal.
No logit (no reranker, reranker down, legacy path) means normal: the bot then behaves as it did before
the reranker existed ("config B" of the seed). A non-finite logit is treated as no logit.
"""

from __future__ import annotations

import math

from worker.domain import Zone


def assign_zone(top_logit: float | None, abstain_below: float = -4.0, weak_below: float = 0.0) -> Zone:
    """The zone of the evidence whose best rerank logit is ``top_logit``."""
    if abstain_below > weak_below:
        raise ValueError("abstain_below must not be above weak_below")
    if top_logit is None or not math.isfinite(top_logit):
        return "normal"
    if top_logit < abstain_below:
        return "abstain"
    if top_logit < weak_below:
        return "weak"
    return "normal"
