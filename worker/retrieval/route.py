"""What one ``Retriever.retrieve`` call runs: its channels and its ranker (one configuration object).

The default ``Route()`` is the shipped path, the best one measured (docs/retrieval.md):

- channels: the cosine one (pgvector) and the lexical one (full-text search over ``post_index``),
  fused by weighted RRF; Discourse search is the legacy path's, not a channel (``keyword=True`` fuses
  it as a third one: the eval compares);
- ranker ``auto``, resolved by ``resolve_ranker`` from what the retriever has:

  ============================  ======================  ==========================================
  fitted second-stage weights   cross-encoder (TEI)     ranker
  ============================  ======================  ==========================================
  yes                           no                      ``stage``: its score orders, its zones
  yes                           yes                     ``stage+rerank``: the stage's shortlist
                                                        read by the cross-encoder; its logit
                                                        orders and sets the zone (-4 / 0 seed)
  no (e.g. bge-m3)              any reranker            ``rerank``: the reranker over the fused
                                                        candidates, its zones
  no                            no reranker             ``fused``: fused order, zone normal
  ============================  ======================  ==========================================

  Where ``citebot calibrate`` fitted weights with the configured cross-encoder's logit (model set
  ``…+ce:<its id>``), ``auto`` is ``stage``: the logit is one of the stage's features
  (``Retriever.ranker``).
  A reranker that is not a cross-encoder (the local model server's calibrated bi-encoder, id
  ``calibrated-bi-encoder:…``) never joins the stage: it ranks no better than cosine (issue 35);
  without stage weights it still ranks, for its calibrated zones (the fused order has none).

The eval names other routes (``eval/evaluation/configs.py``); the worker maps its site-setting flags
onto this one (``citebot_posts_pipeline`` → ``posts``, ``citebot_rerank`` off → ranker ``fused``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Ranker = Literal["auto", "stage", "stage+rerank", "rerank", "fused"]
Resolved = Literal["stage", "stage+rerank", "rerank", "fused"]
RANKERS: tuple[Ranker, ...] = ("auto", "stage", "stage+rerank", "rerank", "fused")
BI_ENCODER_PREFIX = "calibrated-bi-encoder:"


@dataclass(frozen=True, slots=True)
class Route:
    """The channels and the ranker of one retrieval (the default: the shipped path)."""

    posts: bool = True  # False: the legacy path (Discourse search, topic answers)
    vector: bool = True  # the cosine channel
    lexical: bool = True  # the lexical channel (full-text over post_index)
    keyword: bool = False  # Discourse search fused as a third channel
    ranker: Ranker = "auto"
    excerpt: bool = True  # the second bi-encoder's feature in the stage, when configured
    neighbours: int | None = None  # posts around each source as context; None: settings.neighbours
    # the cross-encoder asked for the stage's ``ce_logit`` even when the weights do not use it
    # (``citebot calibrate`` collecting the features of a model set with the cross-encoder)
    cross_encoder: bool = False

    def __post_init__(self) -> None:
        if self.ranker not in RANKERS:
            raise ValueError(f"unknown ranker {self.ranker!r}; known: {', '.join(RANKERS)}")
        if self.ranker.startswith("stage") and not self.vector:
            raise ValueError("the second stage needs the cosine channel")


SHIPPED = Route()


def resolve_ranker(ranker: Ranker, *, has_weights: bool, reranker: bool, cross_encoder: bool) -> Resolved:
    """The ranker ``auto`` stands for, given fitted stage weights, a reranker and whether it is a
    cross-encoder (module table); an explicit ranker stands for itself."""
    if ranker != "auto":
        return ranker
    if has_weights:
        return "stage+rerank" if reranker and cross_encoder else "stage"
    return "rerank" if reranker else "fused"


def is_cross_encoder(reranker_id: str | None) -> bool:
    """Whether a reranker's id (``TeiReranker.reranker_id``, from ``/info``) names a cross-encoder: any
    id but the local model server's calibrated bi-encoder; unknown (no ``/info``) counts as one, as a
    TEI behind a proxy that hides ``/info`` serves a cross-encoder."""
    return not (reranker_id or "").startswith(BI_ENCODER_PREFIX)
