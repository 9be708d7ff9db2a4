"""The eval's cache of excerpt vectors answers the passages it holds and embeds the rest live."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from eval.evaluation.excerpt_cache import CachedEmbedder, text_sha
from worker.testing.models import FakeEmbedder


def test_cached_passages_come_from_the_file_and_the_rest_from_the_model(tmp_path: Path) -> None:
    live = FakeEmbedder(model="second", dimension=2)
    np.savez(
        tmp_path / "v.npz",
        sha=np.asarray([text_sha("cached")], dtype="S64"),
        vec=np.asarray([[0.0, 1.0]], np.float32),
    )
    cached = CachedEmbedder(live, tmp_path / "v.npz")
    out = cached.embed(["cached", "fresh"])
    assert out[0] == [0.0, 1.0]
    assert out[1] == live.embed(["fresh"])[0]
    assert (cached.hits, cached.misses) == (1, 1)
    cached.embed(["cached"], kind="query")  # questions always go to the model
    assert live.calls[0] == (("fresh",), "passage")
    assert live.calls[-1] == (("cached",), "query")
    assert (cached.model, cached.dimension) == ("second", 2)
