"""The ``Reranker`` contract: one finite logit per text, in input order, higher for the better match."""

from __future__ import annotations

import math

from worker.protocols import Reranker
from worker.retrieval.rerank import rerank_text

QUESTION = "my physics objects fall through the terrain collision shape"
RELEVANT = rerank_text(
    "Objects fall through terrain", "add a collision shape to the terrain for physics objects"
)
IRRELEVANT = rerank_text("Window title", "call SetWindowTitle after the engine starts")


def test_one_finite_logit_per_text_in_input_order(reranker: Reranker) -> None:
    scores = reranker.rerank(QUESTION, [IRRELEVANT, RELEVANT, IRRELEVANT])
    assert len(scores) == 3
    assert all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert scores[0] == scores[2]
    assert scores[1] > scores[0]
    assert reranker.rerank(QUESTION, [RELEVANT, IRRELEVANT]) == [scores[1], scores[0]]


def test_names_itself(reranker: Reranker) -> None:
    assert reranker.name
