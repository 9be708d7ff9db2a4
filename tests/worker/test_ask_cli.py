"""`citebot ask` in-process: real PostgreSQL + pgvector; TEI and Discourse faked at the transport."""

from __future__ import annotations

import json

import httpx
import psycopg
import pytest
import respx
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from worker.app.cli import main
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

SEARCH_LEGACY = {
    "posts": [{"id": 20, "topic_id": 2, "post_number": 1, "blurb": "How do I load a scene"}],
    "topics": SEARCH["topics"],
}
# GET /t/2.json as Discourse serves it to an anonymous reader (TopicViewSerializer's post stream,
# PostSerializer#actions_summary with the like entry id 2, discourse-solved's accepted_answer)
TOPIC = {
    "id": 2,
    "title": "Loading a scene from XML",
    "slug": "loading-scene-xml",
    "category_id": 1,
    "archetype": "regular",
    "visible": True,
    "post_stream": {
        "posts": [
            {"id": 20, "post_number": 1, "username": "asker", "user_id": 5, "post_type": 1,
             "cooked": "<p>How do I load a scene from XML?</p>", "actions_summary": []},
            {"id": 22, "post_number": 2, "username": "helper", "user_id": 6, "post_type": 1,
             "cooked": "<p>Maybe the file path is wrong.</p>", "actions_summary": [],
             "accepted_answer": False},
            {"id": 23, "post_number": 3, "username": "expert", "user_id": 7, "post_type": 1,
             "cooked": "<p>Call scene LoadXML with the file.</p>",
             "actions_summary": [{"id": 2, "count": 3}], "accepted_answer": False},
        ],
        "stream": [20, 22, 23],
    },
}  # fmt: skip


@respx.mock
def test_retrieve_only_prints_sources_zone_and_trace(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    respx.post("http://tei.test/embed").mock(side_effect=_embed)
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    assert main(["ask", "--retrieve-only", "--json", "how do I load a scene from XML?"]) == 0
    out = json.loads(capsys.readouterr().out)
    # no stage weights for test-model and no reranker: cosine + lexical fused, zone normal
    assert out["zone"] == "normal"
    assert out["grain"] == "post"
    urls = [s["url"] for s in out["sources"]]
    assert "http://forum.test/t/loading-scene-xml/2/2" in urls
    stages = {s["name"] for s in out["trace"]["stages"]}
    assert stages >= {"embed", "recall", "lexical"}
    assert "keyword" not in stages  # Discourse search is the legacy path's, not a channel
    assert "reply" not in out


@respx.mock
def test_a_title_and_thread_are_asked_as_the_worker_asks_them(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    embed = respx.post("http://tei.test/embed").mock(side_effect=_embed)
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    argv = ["ask", "--retrieve-only", "--json", "--title", "Loading a scene from XML"]
    assert main([*argv, "--thread", "How do I load a scene?", "@citebot can you help with this one?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["asked"]["shape"] == "reply"
    assert out["asked"]["parts"] == {
        "own": "can you help with this one?",
        "title": "Loading a scene from XML",
        "opening": "How do I load a scene?",
    }
    sent = json.loads(embed.calls[0].request.content)["inputs"]
    asked = "Loading a scene from XML\n\ncan you help with this one?\n\nHow do I load a scene?"
    assert asked in (sent if isinstance(sent, list) else [sent])
    assert "http://forum.test/t/loading-scene-xml/2/2" in [s["url"] for s in out["sources"]]


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
def test_a_french_question_gets_the_french_offline_label_as_the_worker_posts_it(
    env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`citebot ask` writes the reply through the worker's own stages 4-5 (worker.generation.reply):
    the offline label is in the question's language, not always English."""
    respx.post("http://tei.test/embed").mock(side_effect=_embed)
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH))
    assert main(["ask", "comment charger une scène depuis un fichier XML avec LoadXML ?", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reply"], out
    assert "hors ligne" in out["reply"]
    assert "Assembled offline" not in out["reply"]
    assert "Written offline" not in out["reply"]


@respx.mock
def test_embeddings_down_falls_back_to_legacy(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    respx.post("http://tei.test/embed").mock(
        return_value=httpx.Response(503, json={"error": "down", "error_type": "Unhealthy"})
    )
    respx.get("http://forum.test/search.json").mock(return_value=httpx.Response(200, json=SEARCH_LEGACY))
    topic = respx.get("http://forum.test/t/2.json").mock(return_value=httpx.Response(200, json=TOPIC))
    assert main(["ask", "--retrieve-only", "--json", "how do I load a scene from XML?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["grain"] == "post"
    assert out["legacy_reason"]
    # search found the topic by its question (#1); the answer (#3, most liked) is the source
    assert out["sources"][0]["url"] == "http://forum.test/t/loading-scene-xml/2/3"
    assert out["sources"][0]["post_id"] == 23
    assert topic.called
    assert "Api-Key" not in topic.calls[0].request.headers  # read as the (anonymous) reader


def test_gate_refusal_needs_no_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--json", "how do I make a pipe bomb at home?"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gate"]["hit"] is True
    assert out["reply"].startswith("<!-- citebot:canned -->")
