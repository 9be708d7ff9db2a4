"""The question as the member asked it, read from the conversation (issue 35, finding 1), end to end:
local forum → webhook → worker process → reply. A new topic's title, the thread a mention sits in, and a
follow-up to the bot's answer each change what is found; main read the post's own words alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.stack import SESSION, Stack, open_stack, wait_for
from tests.eval.forum.export import TOPICS

pytestmark = pytest.mark.integration

# None of these posts holds a word of "how do I set them up?", "can you help with this one?" or
# "That didn't work, any other idea?": found through those words alone, they would not be found.
CONVERSATION_TOPICS: list[dict[str, object]] = [
    *TOPICS,
    {
        "id": 20,
        "title": "Directional light cascades",
        "category_id": 6,
        "posts": [
            ("alice", "Cascaded shadows for a sun light look blocky far from the camera."),
            ("bob", "Give the directional light four cascade splits and raise the shadow map resolution."),
        ],
    },
    {
        "id": 21,
        "title": "Sun light shadows flicker",
        "category_id": 6,
        "posts": [
            ("carol", "My cascaded sun light shadows flicker while the camera moves."),
            (
                "dave",
                "Enable shadow stabilization so each cascade snaps to texels, plus a constant depth bias.",
            ),
        ],
    },
    {
        "id": 22,
        "title": "Sound stops after loading a scene",
        "category_id": 6,
        "posts": [
            ("alice", "When I load a new scene every sound stops playing, even the background music."),
            (
                "bob",
                "Keep the music node in a separate scene you never unload: its sound source keeps playing.",
            ),
        ],
    },
]
SHADOW_TOPICS = {20, 21}


@pytest.fixture
def stack(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[Stack]:
    with open_stack(db_url, redis_url, tmp_path, topics=CONVERSATION_TOPICS) as s:
        yield s


def _answered(stack: Stack, post_id: int) -> dict[str, object]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (r := stack.row(post_id)) and r["state"] in {"posted", "abstained"} and r, what="answered"
    )


def _cited(row: dict[str, object]) -> dict[str, int]:
    """The source the reply cites: the model double always writes ``[[1]]`` (tests/e2e/stack.py)."""
    sources: list[dict[str, int]] = row["sources"]  # type: ignore[assignment]
    return next(s for s in sources if s["n"] == 1)


def test_a_new_topics_title_is_part_of_the_question(stack: Stack) -> None:
    post_id = stack.open_topic(
        "alice", "Cascaded shadows for the sun light", "@citebot how do I set them up?"
    )
    row = _answered(stack, post_id)
    assert row["state"] == "posted", row
    assert _cited(row)["topic_id"] in SHADOW_TOPICS, row["sources"]
    parts = row["trace"]["info"]["question"]["parts"]  # type: ignore[index]
    assert parts == {"own": "how do I set them up?", "title": "Cascaded shadows for the sun light"}


def test_a_mention_inside_a_thread_reads_the_thread_and_finds_its_answer(stack: Stack) -> None:
    post_id = stack.ask("carol", 22, "@citebot can you help with this one?", reply_to_post_number=2)
    row = _answered(stack, post_id)
    assert row["state"] == "posted", row
    assert _cited(row)["topic_id"] == 22, row["sources"]
    question = row["trace"]["info"]["question"]  # type: ignore[index]
    assert question["shape"] == "reply"
    assert question["parts"]["title"] == "Sound stops after loading a scene"
    assert "separate scene you never unload" in question["parts"]["replied_to"]
    assert "every sound stops playing" in question["parts"]["opening"]


def test_a_follow_up_to_the_bot_asks_again_without_citing_the_same_post(stack: Stack) -> None:
    # A first question that stands alone (main answers it too), then the follow-up.
    first = stack.open_topic(
        "alice",
        "Cascaded shadows for the sun light",
        "@citebot how do I set up cascaded shadows for the sun light?",
    )
    first_row = _answered(stack, first)
    assert first_row["state"] == "posted", first_row
    assert _cited(first_row)["topic_id"] in SHADOW_TOPICS, first_row["sources"]
    cited_before = _cited(first_row)["post_id"]
    topic_id = stack.topic_of(first)
    bot_number = stack.http.get(
        f"{stack.forum_url}/posts/{first_row['reply_post_id']}.json",
        headers={"Api-Key": SESSION, "Api-Username": "system"},
    ).json()["post_number"]
    follow = stack.ask(
        "alice", topic_id, "That didn't work, any other idea?", reply_to_post_number=bot_number
    )
    row = _answered(stack, follow)
    assert row["state"] == "posted", row
    assert _cited(row)["post_id"] != cited_before, row["sources"]
    assert _cited(row)["topic_id"] in SHADOW_TOPICS, row["sources"]
    assert cited_before not in {s["post_id"] for s in row["sources"]}  # type: ignore[attr-defined]
    question = row["trace"]["info"]["question"]  # type: ignore[index]
    assert question["shape"] == "follow_up"
    assert question["parts"]["earlier_question"] == "how do I set up cascaded shadows for the sun light?"
    assert question["already_cited"] == [cited_before]
