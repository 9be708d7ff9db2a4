"""The bot's own sentences per place and language (``worker.generation.wording``)."""

from __future__ import annotations

import pytest

from tests.worker.generation.conftest import make_source
from worker.answers import cited_posts
from worker.domain import ForumPost
from worker.generation.offline import closest_topics
from worker.generation.wording import PLACES, ask_forum, place_of, wording


def _post(**fields: object) -> ForumPost:
    base = {"id": 9, "topic_id": 3, "post_number": 1, "username": "al", "user_id": 4}
    return ForumPost(**{**base, **fields})  # type: ignore[arg-type]


def test_place_of_a_post() -> None:
    assert place_of(_post()) == "new_topic"
    assert place_of(_post(post_number=4)) == "reply"
    assert place_of(_post(post_number=1, archetype="private_message")) == "pm"
    assert place_of(_post(post_number=3, archetype="private_message")) == "pm"


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("language", ["en", "fr"])
def test_only_a_private_message_is_sent_to_open_a_topic(place: str, language: str) -> None:
    said = wording(language, place)  # type: ignore[arg-type]
    sends = ("open a topic" in said.abstain) or ("ouvrez un sujet" in said.abstain)
    assert sends is (place == "pm")
    for text in (said.abstain, said.weak_outro):
        assert "new topic" not in text
        assert "nouveau sujet" not in text
    assert ("Do not tell them to open a new topic" in ask_forum(place)) is (place != "pm")  # type: ignore[arg-type]


def test_french_and_english_are_apart() -> None:
    assert wording("fr").offline_footer.startswith("_Assemblé hors ligne")
    assert wording("en").offline_footer.startswith("_Assembled offline")
    assert wording("de") == wording("en")  # anything else: English, as the gate's detector says


def test_closest_topics_are_cited_by_title_once_each() -> None:
    sources = [make_source(1, "Shadows", "x"), make_source(2, "Shadows", "y"), make_source(3, "Fog", "z")]
    text = closest_topics(sources, "fr", "reply")
    assert text.startswith(wording("fr").closest)
    assert "- Shadows [[1]]\n- Fog [[3]]" in text
    assert text.endswith(wording("fr", "reply").weak_outro)


def test_the_numbers_a_reply_cited_come_from_its_last_sanitize_stage() -> None:
    trace = {
        "stages": [
            {"name": "sanitize", "info": {"cited": [1, 2]}},
            {"name": "recheck"},
            {"name": "sanitize", "info": {"cited": [2]}},
        ]
    }
    sources = [{"n": 1, "post_id": 101}, {"n": 2, "post_id": 102}]
    assert cited_posts(sources, trace) == (102,)
    # A trace that does not say which were cited: every source handed to the model counts.
    assert cited_posts(sources, {"stages": [{"name": "generate"}]}) == (101, 102)
    assert cited_posts(sources, None) == (101, 102)
