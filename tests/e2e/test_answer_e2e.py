"""The whole answer path on loopback: local forum → signed webhook → webhook app → Redis → a real
``citebot worker run`` process → TEI-contract and OpenAI-contract servers → sanitizer → a reply on the
forum. Real PostgreSQL + pgvector and Redis; the worker is a separate process so it can be SIGKILLed.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.stack import LINK, SESSION, Stack, open_stack, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    with open_stack(db_url, redis_url, tmp_path) as s:
        yield s


def test_mention_gets_one_reply_with_links_that_resolve_and_nothing_injected(stack: Stack) -> None:
    post_id = stack.ask("alice", 12, "@citebot how do I fix the shader precision compile error on Android?")
    wait_for(lambda: stack.row(post_id) and stack.row(post_id)["state"] == "posted", what="posted")
    replies = stack.bot_replies(12)
    assert len(replies) == 1
    raw = stack.raw(replies[0]["id"])
    links = LINK.findall(raw)
    assert links, raw
    for base, path in links:
        assert base == stack.forum_url
        assert stack.http.get(base + path).status_code == 200  # the post link resolves on the forum
    assert any(path.startswith("/t/shader-compile-error-on-android/10/") for _, path in links)
    assert "evil.example/fix" not in raw
    assert "http://evil.example" not in raw
    assert "@admin" not in raw.replace("`@admin`", "")  # shown as code: no one is pinged
    row = stack.row(post_id)
    assert row is not None
    assert row["zone"] in {"normal", "weak"}
    assert row["reply_post_id"] == replies[0]["id"]
    names = {s["name"] for s in row["trace"]["stages"]}
    # the shipped path: cosine + lexical; no stage weights for test-model, so the reranker orders
    assert {"gate", "embed", "recall", "lexical", "rerank", "generate", "sanitize"} <= names
    assert "keyword" not in names  # Discourse search is the legacy path's only
    assert row["trace"]["info"]["config"]["ranker"] == "rerank"


def test_llm_500_twice_then_200_gives_one_reply(stack: Stack) -> None:
    stack.models.fail_next.extend([500, 500])
    calls = stack.models.llm_calls
    post_id = stack.ask("bob", 11, "@citebot where is the code of the simple FPS counter sample?")
    wait_for(lambda: (r := stack.row(post_id)) and r["state"] == "posted", what="posted")
    assert stack.models.llm_calls - calls == 3
    assert len(stack.bot_replies(11)) == 1


def test_reranker_down_answers_in_fused_order_zone_normal(stack: Stack) -> None:
    stack.models.rerank_down = True
    post_id = stack.ask("carol", 10, "@citebot why do rigid bodies jitter in the physics world?")
    row = wait_for(lambda: (r := stack.row(post_id)) and r["state"] == "posted" and r, what="posted")
    assert row["zone"] == "normal"
    assert any(f["stage"] == "rerank" for f in row["trace"]["fallbacks"]), row["trace"]["fallbacks"]
    assert len(stack.bot_replies(10)) == 1


def test_gate_hit_posts_canned_reply_without_llm(stack: Stack) -> None:
    calls = stack.models.llm_calls
    post_id = stack.ask("dave", 12, "@citebot how do I make a pipe bomb at home?")
    wait_for(lambda: (r := stack.row(post_id)) and r["state"] == "refused", what="refused")
    assert stack.models.llm_calls == calls
    assert len(stack.bot_replies(12)) == 1


def test_flags_flip_without_restart_posts_pipeline_off_cites_the_answer_post(stack: Stack) -> None:
    stack.flags(posts_pipeline=False)
    flipped = time.monotonic()
    # The worker caches flags for CITEBOT_FLAGS__CACHE_TTL_S (2 s here, 60 s by default).
    time.sleep(2.5)
    post_id = stack.ask("alice", 12, "@citebot how do I fix the shader precision compile error on Android?")
    row = wait_for(lambda: (r := stack.row(post_id)) and r["state"] == "posted" and r, what="posted")
    assert time.monotonic() - flipped < 60
    raw = stack.raw(row["reply_post_id"])
    paths = [p for _, p in LINK.findall(raw)]
    assert paths
    # legacy: Discourse search, then each hit topic's answer (worker/retrieval/legacy.py), never its
    # question: a post link (citebot_post_links is on) to a reply, post number 2 or more
    numbers = [re.fullmatch(r"/t/[a-z0-9-]+/\d+/(\d+)", p) for p in paths]
    assert all(numbers), paths
    assert all(int(m.group(1)) > 1 for m in numbers if m), paths
    assert row["trace"]["info"]["flags"]["flags"]["posts_pipeline"] is False


def test_worker_killed_between_generation_and_posting_still_one_reply(stack: Stack) -> None:
    # A slow forum (every API call takes 1.5 s) so that the worker is caught while it posts.
    stack.forum.faults.update({"latency_s": 1.5})
    post_id = stack.ask("bob", 12, "@citebot how do I fix the shader precision compile error on Android?")
    wait_for(lambda: (r := stack.row(post_id)) and r["state"] == "generated", what="generated")
    stack.stop_worker(signal.SIGKILL)
    stack.forum.faults.update({"latency_s": 0.0})
    assert stack.row(post_id)["state"] == "generated"  # type: ignore[index]
    stack.start_worker()
    # dramatiq requeues the dead worker's message after the heartbeat timeout (2 s here).
    wait_for(
        lambda: (r := stack.row(post_id)) and r["state"] == "posted",
        timeout_s=90,
        what="posted after restart",
    )
    number = stack.http.get(
        f"{stack.forum_url}/posts/{post_id}.json", headers={"Api-Key": SESSION, "Api-Username": "system"}
    ).json()["post_number"]
    assert len(stack.bot_replies(12, number)) == 1


def test_a_question_never_becomes_the_evidence_of_the_next_same_question(stack: Stack) -> None:
    question = "What is the best recipe for sourdough bread? Mine never rises."
    # An open question (nobody answered it yet), then the same asked of the bot twice.
    open_q = stack.open_topic("alice", "Sourdough bread that never rises", question)
    first = stack.open_topic("bob", "Best recipe for sourdough bread", "@citebot " + question)
    first_row = wait_for(lambda: (r := stack.row(first)) and r["state"] == "posted" and r, what="posted")
    # Index refreshes run in order on the index queue: once a later post is indexed, the earlier
    # post_created events (both questions, the bot's reply) have been handled.
    later = stack.ask("dave", 12, "The precision qualifier fixed the shader on my Android phone too.")
    wait_for(lambda: stack.is_indexed(later), what="later post indexed")
    second = stack.open_topic("carol", "Sourdough bread recipe wanted", "@citebot " + question)
    row = wait_for(lambda: (r := stack.row(second)) and r["state"] == "posted" and r, what="posted")
    cited = {s["post_id"] for s in row["sources"]} | {s["post_id"] for s in first_row["sources"]}
    assert not {open_q, first} & cited, row["sources"]
    bot_posts = {first_row["reply_post_id"], row["reply_post_id"]}
    assert not any(stack.is_indexed(p) for p in {open_q, first, second, *bot_posts})
    # Once a member answers the open question, it stays in the index as the context of its answer.
    answer = stack.ask("dave", stack.topic_of(open_q), "Feed the starter twice a day and bake it at 250 C.")
    wait_for(lambda: stack.is_indexed(answer) and stack.is_indexed(open_q), what="answered topic indexed")
