"""The eval's cache of excerpt vectors answers the passages it holds and embeds the rest live."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from eval.evaluation.excerpt_cache import CachedEmbedder, index_texts, text_sha, write_vectors
from worker.retrieval.excerpts import excerpt_of
from worker.testing.models import FakeEmbedder

SAMPLE = Path(__file__).resolve().parents[2] / "eval" / "data" / "urho3d-sample"


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


@pytest.mark.integration
def test_the_built_file_holds_every_indexed_excerpt_and_the_cache_answers_them_all(
    db_url: str, tmp_path: Path
) -> None:
    export = tmp_path / "forum"
    (export / "topics").mkdir(parents=True)
    for topic in sorted((SAMPLE / "topics").glob("*.json"))[:3]:
        shutil.copy(topic, export / "topics" / topic.name)
    rows = index_texts(export, db_url, model="test-model", dimension=8)  # the tests' index_meta
    assert rows
    live = FakeEmbedder(model="second", dimension=4)
    figures = write_vectors(rows, live, tmp_path / "v.npz", chunk=2)
    assert figures["excerpts"] == len(rows)
    with np.load(tmp_path / "v.npz") as data:
        assert list(data["post_id"]) == [r[0] for r in rows]
    cached = CachedEmbedder(FakeEmbedder(model="second", dimension=4), tmp_path / "v.npz")
    excerpts = [excerpt_of(title, text)[0] for _pid, title, text in rows]  # what the backfill embeds
    assert np.allclose(cached.embed(excerpts), live.embed(excerpts), atol=1e-6)  # stored as float32
    assert (cached.hits, cached.misses) == (len(rows), 0)
