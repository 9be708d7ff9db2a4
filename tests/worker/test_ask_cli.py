"""`citebot ask` in-process: real PostgreSQL + pgvector; TEI and Discourse faked at the transport."""

from __future__ import annotations

import json

import httpx
import psycopg
import pytest
import respx
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from worker.cli import main
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration

EMBEDDER = FakeEmbedder(model="test-model", dimension=8)
POSTS = [
    (11, 1, 2, "Shadow maps flicker", "shadow-maps-flicker", "Raise the depth bias to stop shadow flicker."),
    (21, 2, 2, "Loading a scene from XML", "loading-scene-xml", "Call LoadXML to load a scene from XML."),
]


@pytest.fixture
def env(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        for post_id, topic_id, number, title, slug, text in POSTS:
            conn.execute(
                "INSERT INTO post_index (post_id, topic_id, post_number, topic_slug, topic_title, text,"
                " digest, model, embedding, category_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, '\\x00', 'test-model', %s, 1)",
                (
                    post_id,
                    topic_id,
                    number,
                    slug,
                    title,
                    text,
                    HalfVector(EMBEDDER.vector(f"{title}\n{text}")),
                ),
            )
        # The forum describes category 1 as public (backfill.categories): its posts may be cited.
        conn.execute(
            "INSERT INTO categories (category_id, read_restricted, seen_by) VALUES (1, false, 'test')"
        )
    for key, value in {
        "CITEBOT_DATABASE__URL": db_url,
        "CITEBOT_EMBEDDINGS__PROVIDER": "tei",
        "CITEBOT_EMBEDDINGS__BASE_URL": "http://tei.test",
        "CITEBOT_EMBEDDINGS__MODEL": "test-model",
        "CITEBOT_EMBEDDINGS__DIMENSION": "8",
        "CITEBOT_DISCOURSE__BASE_URL": "http://forum.test",
    }.items():
        monkeypatch.setenv(key, value)
    return db_url


def _embed(request: httpx.Request) -> httpx.Response:
    inputs = json.loads(request.content)["inputs"]
    return httpx.Response(200, json=EMBEDDER.embed(inputs if isinstance(inputs, list) else [inputs]))


SEARCH = {
    "posts": [{"id": 21, "topic_id": 2, "post_number": 2, "blurb": "Call LoadXML"}],
    "topics": [{"id": 2, "title": "Loading a scene from XML", "slug": "loading-scene-xml", "category_id": 1}],
}


@respx.mock
def test_retrieve_only_prints_sources_zone_and_trace(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    respx.post("http://tei.test/embed").mock(side_effect=_embed)
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    assert main(["ask", "--retrieve-only", "--json", "how do I load a scene from XML?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["zone"] == "normal"  # no reranker configured: fused order, zone normal
    assert out["grain"] == "post"
    urls = [s["url"] for s in out["sources"]]
    assert "http://forum.test/t/loading-scene-xml/2/2" in urls
    assert {s["name"] for s in out["trace"]["stages"]} >= {"embed", "recall", "keyword"}
    assert "reply" not in out


@respx.mock
def test_full_run_with_offline_generator_prints_a_sanitized_reply(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    respx.post("http://tei.test/embed").mock(side_effect=_embed)
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    assert main(["ask", "how do I load a scene from XML?"]) == 0
    text = capsys.readouterr().out
    assert "zone: normal" in text
    assert "reply:" in text
    assert "http://forum.test/t/loading-scene-xml/2/2" in text
    assert "offline" in text.lower()


@respx.mock
def test_embeddings_down_falls_back_to_legacy(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    respx.post("http://tei.test/embed").mock(
        return_value=httpx.Response(503, json={"error": "down", "error_type": "Unhealthy"})
    )
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    assert main(["ask", "--retrieve-only", "--json", "how do I load a scene from XML?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["grain"] == "topic"
    assert out["legacy_reason"]
    assert out["sources"][0]["url"] == "http://forum.test/t/loading-scene-xml/2"


def test_gate_refusal_needs_no_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--json", "how do I make a pipe bomb at home?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gate"]["hit"] is True
    assert out["reply"].startswith("<!-- citebot:canned -->")
