from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.addressing import BotIdentity, decide, mentions, visible_text
from worker.domain import ForumPost

BOT = BotIdentity("citebot", user_id=-5, answer_pms=False)


def post(raw: str | None = "hello", **fields: object) -> ForumPost:
    base = ForumPost(id=10, topic_id=3, post_number=2, username="alice", user_id=42, raw=raw)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("@citebot how do I compile?", True),
        ("hey @CiteBot, help", True),
        ("ask @citebot.", True),
        ("(@citebot)", True),
        ("@citebot2 is another user", False),
        ("@citebot-old is another user", False),
        ("@citebot.old is another user", False),
        ("mail me@citebot please", False),
        ("citebot without at", False),
        ("`@citebot` in inline code", False),
        ("``x `@citebot` y`` in double backticks", False),
        ("```\n@citebot in a fence\n```", False),
        ("~~~python\n@citebot\n~~~\n", False),
        ("text\n\n    @citebot indented code\n", False),
        ("> @citebot quoted\n\nmy own words", False),
        ('[quote="bob, post:1, topic:3"]\n@citebot said\n[/quote]\nthanks', False),
        ("[quote]\n[quote]\n@citebot\n[/quote]\n[/quote]\n", False),
        ("[quote]\nold\n[/quote]\n@citebot new question", True),
        ("```\ncode\n```\n@citebot after the fence", True),
        ("[quote]\nunclosed @citebot", False),
        ("stray [/quote] then @citebot", True),
    ],
)
def test_mentions_outside_code_and_quotes(raw: str, expected: bool) -> None:
    assert mentions(raw, "citebot") is expected


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"raw": "@citebot hi"}, "mention"),
        ({"raw": "thanks", "reply_to_username": "CiteBot"}, "reply"),
        ({"raw": "thanks", "reply_to_username": "bob"}, "not_addressed"),
        ({"raw": "@citebot hi", "user_id": -1}, "system_user"),
        ({"raw": "@citebot hi", "user_id": 0}, "system_user"),
        ({"raw": "@citebot hi", "username": "citebot"}, "self"),
        ({"raw": "@citebot hi", "user_id": 77}, "mention"),
        ({"raw": "@citebot hi", "post_type": 4}, "post_type"),
        ({"raw": "@citebot hi", "post_type": 2}, "post_type"),
        ({"raw": "@citebot hi", "hidden": True}, "hidden"),
        ({"raw": "@citebot hi", "deleted": True}, "deleted"),
        ({"raw": None, "archetype": "private_message"}, "not_addressed"),
    ],
)
def test_decide(fields: dict[str, object], reason: str) -> None:
    assert decide(post(**fields), BOT).reason == reason  # type: ignore[arg-type]


def test_bot_id_counts_as_self_and_pms_need_the_flag() -> None:
    bot = BotIdentity("citebot", user_id=77, answer_pms=True)
    assert decide(post("@citebot hi", user_id=77, username="renamed"), bot).reason == "self"
    pm = post("please help", archetype="private_message")
    assert decide(pm, bot).addressed
    assert decide(pm, BOT).reason == "not_addressed"


@given(st.text(max_size=300))
def test_visible_text_never_raises_and_never_grows(raw: str) -> None:
    out = visible_text(raw)
    assert len(out) <= len(raw) + raw.count("\n") + 1


@given(st.text(alphabet=st.characters(blacklist_characters="@`[>~ \t"), max_size=80))
def test_mention_survives_surrounding_plain_text(text: str) -> None:
    raw = f"{text}\n\n@citebot {text}"
    assert mentions(raw, "citebot")
