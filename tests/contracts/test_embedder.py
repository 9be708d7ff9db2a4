"""The ``Embedder`` contract: what recall and the backfill rely on, whichever implementation runs."""

from __future__ import annotations

import math

from worker.protocols import Embedder

TEXTS = ["How do I add a collision shape?", "Shadows flicker on the terrain", "Window title"]


def test_one_unit_vector_of_the_declared_dimension_per_text_in_order(embedder: Embedder) -> None:
    vectors = embedder.embed(TEXTS, kind="passage")
    assert len(vectors) == len(TEXTS)
    for vector in vectors:
        assert len(vector) == embedder.dimension
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-6)
    one_by_one = [embedder.embed([t])[0] for t in TEXTS]
    assert all(
        math.isclose(a, b, abs_tol=1e-6)
        for v, w in zip(vectors, one_by_one, strict=True)
        for a, b in zip(v, w, strict=True)
    )


def test_deterministic_and_names_its_model(embedder: Embedder) -> None:
    assert embedder.embed(["same text"], kind="query") == embedder.embed(["same text"], kind="query")
    assert embedder.model
    assert embedder.dimension > 0


def test_no_texts_no_vectors(embedder: Embedder) -> None:
    assert embedder.embed([]) == []
