"""Issue 35, findings 2–4, end to end: evidence that answers, and replies that fit the conversation.

Each test asks as a member, through the forum double (it cooks ``[quote]`` into the ``aside.quote``
Discourse writes, and serializes a quote-reply without ``reply_to_user``), the webhook, the real worker
process and the offline extractive generator, so the reply's words are the ones the bot posts:

- a quote-reply to the bot is neither indexed as evidence nor answered with what it quotes;
- an answer a member pasted inside an unattributed ``[quote]`` ("[quote]…[/quote] works, thanks") is
  evidence, and the bot quotes and cites it instead of "I found nothing";
- an "I don't know" inside a topic does not tell the member to open a new topic;
- a French question gets French sentences and a French footer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.stack import LINK, SESSION, Stack, open_stack, wait_for
from tests.eval.forum.export import TOPICS

pytestmark = pytest.mark.integration

ANSWERED = {"posted", "abstained", "failed"}
# A question nobody answered yet: the answer arrives live, pasted in a quote.
SKYBOX: dict[str, object] = {
    "id": 42,
    "title": "Skybox seams on cube map",
    "category_id": 6,
    "posts": [("alice", "My skybox shows visible seams at the cube map edges. How can I get rid of them?")],
}


@pytest.fixture
def offline(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    """The stack with no LLM configured: the offline extractive generator writes the replies."""
    with open_stack(
        db_url, redis_url, tmp_path, topics=[*TOPICS, SKYBOX], env={"CITEBOT_LLM__BASE_URL": ""}
    ) as s:
        yield s


def _answer(stack: Stack, post_id: int, timeout_s: float = 45.0) -> dict[str, Any]:
    row: dict[str, Any] = wait_for(
        lambda: (r := stack.row(post_id)) and r["state"] in ANSWERED and r, timeout_s, what="answered"
    )
    return row


def _post(stack: Stack, post_id: int) -> dict[str, Any]:
    r = stack.http.get(
        f"{stack.forum_url}/posts/{post_id}.json", headers={"Api-Key": SESSION, "Api-Username": "system"}
    )
    r.raise_for_status()
    data: dict[str, Any] = r.json()
    return data


def _indexed_after(stack: Stack) -> None:
    """Index refreshes run in order on the index queue: once a later post is indexed, every earlier
    ``post_created`` has been handled."""
    later = stack.ask("dave", 10, "The precision qualifier fixed the shader on my Android phone too.")
    wait_for(lambda: stack.is_indexed(later), what="later post indexed")


def test_a_quote_reply_to_the_bot_is_not_evidence_nor_answered_with_what_it_quotes(offline: Stack) -> None:
    stack = offline
    question = stack.ask("alice", 12, "@citebot how do I fix the shader precision compile error on Android?")
    first = _answer(stack, question)
    assert first["state"] == "posted", first
    reply = _post(stack, first["reply_post_id"])
    quoted = next(line for line in reply["raw"].splitlines() if line.startswith("- "))
    # "select text → Quote → reply" on the bot's answer: Discourse leaves reply_to_user out
    follow_up = stack.ask(
        "alice",
        12,
        f'[quote="citebot, post:{reply["post_number"]}, topic:12"]\n{quoted}\n[/quote]\n\n'
        "That did not work on my phone, is there any other idea for the shader error?",
        reply_to_post_number=reply["post_number"],
    )
    assert "reply_to_user" not in _post(stack, follow_up)
    second = _answer(stack, follow_up)
    _indexed_after(stack)
    # the member's post (the bot's words inside it) is never evidence, nor is the bot's reply
    assert not stack.is_indexed(follow_up)
    assert not stack.is_indexed(first["reply_post_id"])
    # what the member quoted (the bot's answer and the posts it cited) is not handed back to them
    cited_first = {s["post_id"] for s in first["sources"]}
    assert cited_first
    assert not cited_first & {s["post_id"] for s in second["sources"]}, second["sources"]
    if second["reply_post_id"] is not None:
        assert quoted.split(" [")[0].removeprefix("- ") not in stack.raw(second["reply_post_id"])


def test_an_answer_pasted_inside_a_quote_is_evidence_and_cited(offline: Stack) -> None:
    stack = offline
    answer = stack.ask(
        "alice",
        42,
        "Found this on the mailing list:\n\n[quote]\nClamp the cube map texture address mode and enable "
        "seamless cube map filtering to remove the skybox seams.\n[/quote]\n\nworks, thanks",
    )
    wait_for(lambda: stack.is_indexed(answer), what="the quoting post indexed")
    asked = stack.open_topic(
        "carol", "Seams in my skybox cube map", "@citebot how do I remove the seams of my skybox cube map?"
    )
    row = _answer(stack, asked)
    assert row["state"] == "posted", row
    raw = stack.raw(row["reply_post_id"])
    assert "seamless cube map filtering" in raw, raw
    assert "I found nothing" not in raw
    # cited in topic 42: the quoting post, or its question with the quoting post among its nearby posts
    assert any(path.startswith("/t/skybox-seams-on-cube-map/42/") for _, path in LINK.findall(raw)), raw


def test_an_i_dont_know_inside_a_topic_does_not_send_the_member_to_a_new_topic(offline: Stack) -> None:
    stack = offline
    stack.ask(
        "dave",
        12,
        "More details: 400 rigid bodies, Bullet 2.89, fixed timestep 60 Hz, the jitter starts at about 300.",
    )
    asked = stack.ask("dave", 12, "@citebot what is the best recipe for sourdough bread?")
    row = _answer(stack, asked)
    assert row["zone"] in {"abstain", "weak"}, row
    raw = stack.raw(row["reply_post_id"])
    assert "new topic" not in raw, raw
    assert "members following this topic" in raw, raw


def test_a_french_question_gets_french_sentences_and_a_french_footer(offline: Stack) -> None:
    stack = offline
    asked = stack.ask(
        "alice",
        10,
        "@citebot comment corriger l'erreur de compilation du shader sur Android avec la précision ?",
    )
    row = _answer(stack, asked)
    assert row["state"] in {"posted", "abstained"}, row
    raw = stack.raw(row["reply_post_id"])
    assert "hors ligne" in raw, raw
    assert "offline" not in raw, raw
    assert "language model" not in raw, raw
    assert raw.startswith(("Voici", "Les éléments", "Je ne sais pas")), raw
