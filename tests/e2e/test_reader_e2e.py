"""Issue 32, finding 1, end to end: the search behind an answer runs as the reader, never as the bot.

Discourse answers ``/search.json`` with the rights of the user the key acts as: to an admin it returns
read-restricted categories and, where whispers are on, whispers (``lib/search.rb``: the guardian's
``secure_category_ids``; admins are whisperers). The bot's key is an admin's. The legacy path (flag
``citebot_posts_pipeline`` off, an empty index, the embedder down) answered from those hits, and the
same hits fed the keyword channel, so staff-only text reached the LLM and public topics.

Each test asks, as a member in a public topic, a question whose best matches are a staff-only topic
and a whisper, and checks that neither the prompt the LLM received nor the reply carries them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.stack import LINK, SESSION, Stack, open_stack, wait_for
from tests.eval.forum.export import TOPICS

pytestmark = pytest.mark.integration

STAFF_CATEGORY = 9
STAFF_SECRET = "zebrastaffnote"
WHISPER_SECRET = "okapiwhispernote"
QUESTION = "@citebot how do I fix the shader precision compile error on Android?"
STAFF_TOPIC: dict[str, object] = {
    "id": 20,
    "title": "Android shader precision compile error (staff notes)",
    "category_id": STAFF_CATEGORY,
    "posts": [
        ("alice", f"Shader precision compile error on Android: the fix is {STAFF_SECRET} in the build."),
        ("bob", f"Confirmed, the {STAFF_SECRET} fix for the Android shader precision compile error works."),
    ],
}


def _llm_saw(stack: Stack, secret: str) -> bool:
    return any(secret in str(body) for body in stack.models.bodies)


def _whisper(stack: Stack, topic_id: int) -> None:
    """A staff whisper in a public topic, matching the question better than any public post."""
    r = stack.http.post(
        f"{stack.forum_url}/posts.json",
        headers={"Api-Key": SESSION, "Api-Username": "system"},
        json={
            "topic_id": topic_id,
            "whisper": True,
            "raw": f"Staff only: the shader precision compile error on Android fix is {WHISPER_SECRET}.",
        },
    )
    r.raise_for_status()
    assert r.json()["post_type"] == 4


def _answered(stack: Stack, post_id: int) -> dict[str, Any]:
    row: dict[str, Any] = wait_for(
        lambda: (r := stack.row(post_id)) and r["state"] in {"posted", "abstained"} and r,
        what="answered",
    )
    return row


@pytest.fixture
def stack(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    forum = {"categories": {STAFF_CATEGORY: ("Staff", True)}}
    with open_stack(db_url, redis_url, tmp_path, forum=forum, topics=[*TOPICS, STAFF_TOPIC]) as s:
        yield s


def _admin_search_finds_both(stack: Stack) -> None:
    """The double is as strict as Discourse: the admin's search does return the staff topic and the
    whisper (so the assertions below are about who searched, not about a kind double)."""
    r = stack.http.get(
        f"{stack.forum_url}/search.json",
        params={"q": "shader precision android"},
        headers={"Api-Key": SESSION, "Api-Username": "system"},
    )
    topics = {p["topic_id"] for p in r.json()["posts"]}
    assert {20, 12} <= topics, topics
    anonymous = stack.http.get(f"{stack.forum_url}/search.json", params={"q": "shader precision android"})
    assert not {20, 12} & {p["topic_id"] for p in anonymous.json()["posts"]}


@pytest.mark.parametrize("path", ["flag_off", "embedder_down"])
def test_legacy_answers_never_see_staff_topics_or_whispers(stack: Stack, path: str) -> None:
    _whisper(stack, 12)
    _admin_search_finds_both(stack)
    if path == "flag_off":
        stack.flags(posts_pipeline=False)
        time.sleep(2.5)  # the worker caches flags for CITEBOT_FLAGS__CACHE_TTL_S (2 s here)
    else:
        stack.models.knobs.tei_status = 503  # embeddings (and rerank) down
    post_id = stack.ask("carol", 11, QUESTION)
    row = _answered(stack, post_id)
    assert any(f["stage"] == "retrieval" for f in row["trace"]["fallbacks"]), row["trace"]["fallbacks"]
    assert not _llm_saw(stack, STAFF_SECRET)
    assert not _llm_saw(stack, WHISPER_SECRET)
    assert {s["topic_id"] for s in row["sources"]}.isdisjoint({20, 12})
    raw = stack.raw(row["reply_post_id"])
    assert STAFF_SECRET not in raw
    assert WHISPER_SECRET not in raw
    assert all(not path.startswith(("/t/t/20", "/t/physics")) for _, path in LINK.findall(raw))


def test_the_posts_pipeline_never_brings_a_whisper_to_the_llm(stack: Stack) -> None:
    """The shipped path reads the index only (cosine + lexical): Discourse search is the legacy path's,
    tested above as the reader (anonymous, no key)."""
    _whisper(stack, 12)
    post_id = stack.ask("carol", 11, QUESTION)
    row = _answered(stack, post_id)
    names = {s["name"] for s in row["trace"]["stages"]}
    assert "lexical" in names
    assert "keyword" not in names
    assert not _llm_saw(stack, WHISPER_SECRET)
    reads = [c for c in stack.forum.calls if c.path == "/search.json"]
    assert not any(c.keyed for c in reads)
