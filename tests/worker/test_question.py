from __future__ import annotations

import pytest

from worker.question import extract_question, question_for


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("@citebot how do I load a scene from XML?", "how do I load a scene from XML?"),
        ("How do I load a scene from XML? @CiteBot", "How do I load a scene from XML?"),
        (
            '[quote="bob, post:3, topic:9"]\nuse the old API\n[/quote]\n@citebot is the old API still there?',
            "is the old API still there?",
        ),
        ("> quoted line\n@citebot why does my shader not compile?", "why does my shader not compile?"),
        (
            "@citebot why does my shader not compile?\n\nThanks in advance!\nBob",
            "why does my shader not compile?",
        ),
        ("@citebot comment compiler pour Android ?\nMerci d'avance", "comment compiler pour Android ?"),
        ("@citebot", ""),
        ("@citebot ?", ""),
        (
            "email me at x@citebot.org about this long question",
            "email me at x@citebot.org about this long question",
        ),
        # Another user whose name starts with the bot's is not the bot: only the bot's own mention goes
        # (the same reading as the webhook's addressing decision).
        (
            "@citebot-2 said it works; @citebot does the Android build need NDK r21?",
            "@citebot-2 said it works; does the Android build need NDK r21?",
        ),
    ],
)
def test_extract_question(raw: str, expected: str) -> None:
    assert extract_question(raw, "citebot") == expected


def test_mention_only_uses_topic_title_and_first_post() -> None:
    q = question_for("@citebot", "citebot", "Shadows flicker on Android", "My shadows flicker on a Pixel 6.")
    assert q == "Shadows flicker on Android\n\nMy shadows flicker on a Pixel 6."


def test_own_question_wins_over_topic() -> None:
    q = question_for("@citebot what is the default near clip?", "citebot", "Camera", "first post")
    assert q == "what is the default near clip?"
