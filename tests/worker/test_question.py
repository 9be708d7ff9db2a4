from __future__ import annotations

import pytest

from worker.domain import ForumPost, ForumTopic
from worker.question import (
    CONTEXT_CHARS,
    OWN_CHARS,
    EarlierAnswer,
    build_question,
    extract_question,
    pointed_posts,
    read_question,
    stands_alone,
    thread_question,
)
from worker.quotes import Quote, markdown_quotes, quote_blocks
from worker.testing.forum import FakeForum


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


def test_a_mention_alone_asks_about_the_topic_title_and_opening_post() -> None:
    q = build_question(
        "@citebot", "citebot", title="Shadows flicker", opening="My shadows flicker on a Pixel 6."
    )
    assert q.text == "Shadows flicker\n\nMy shadows flicker on a Pixel 6."


def test_a_new_topics_title_comes_with_the_members_words() -> None:
    q = build_question(
        "@citebot how do I set them up?",
        "citebot",
        title="Cascaded shadows for the sun light",
        shape="new_topic",
    )
    assert q.text == "Cascaded shadows for the sun light\n\nhow do I set them up?"
    assert q.trace() == {
        "shape": "new_topic",
        "chars": len(q.text),
        "parts": {"own": "how do I set them up?", "title": "Cascaded shadows for the sun light"},
        "already_cited": [],
    }


def test_context_follows_the_members_words_in_priority_order_without_repeats() -> None:
    opening = "When I load a new scene every sound stops playing, even the music."
    q = build_question(
        "@citebot can you help with this one?",
        "citebot",
        title="Sound stops",
        quoted=["the music node belongs to the old scene I think"],
        replied_to=opening,  # the same text as the opening post: kept once
        opening=opening,
    )
    assert q.text.split("\n\n") == [
        "Sound stops",
        "can you help with this one?",
        "the music node belongs to the old scene I think",
        opening,
    ]
    assert q.replied_to == opening
    assert q.opening == ""


def test_every_part_is_bounded_and_a_long_question_gets_less_context() -> None:
    word = "shader "
    long_own = word * 400
    q = build_question(long_own, "citebot", title=word * 100, opening=word * 400, replied_to=word * 400)
    assert len(q.own) <= OWN_CHARS
    assert len(q.title) <= 200
    assert len(q.text) <= OWN_CHARS + 200 + CONTEXT_CHARS + 10
    short = build_question("why does it crash?", "citebot", opening=word * 400, replied_to=word * 400)
    assert len(q.replied_to) + len(q.opening) < len(short.replied_to) + len(short.opening)


def test_a_context_part_too_short_to_say_anything_is_left_out() -> None:
    q = build_question(
        "@citebot what is the default near clip?", "citebot", title="Camera", opening="first post"
    )
    assert q.text == "Camera\n\nwhat is the default near clip?"


def test_a_follow_up_carries_the_earlier_question_and_what_was_cited() -> None:
    q = thread_question(
        "@citebot That didn't work, any other idea?",
        "citebot",
        title="Cascaded shadows for the sun light",
        thread=["@citebot how do I set up cascaded shadows for the sun?"],
        follow_up=True,
        already_cited=[42, 42, 7],
    )
    assert q.shape == "follow_up"
    assert q.earlier_question == "how do I set up cascaded shadows for the sun?"
    assert q.already_cited == (42, 7)
    assert "That didn't work, any other idea?" in q.text
    assert q.trace()["already_cited"] == [42, 7]


def test_a_follow_up_thread_ends_with_the_bots_answer_which_is_never_read() -> None:
    thread = ["Opening post about the shadows.", "@citebot how do I set cascades?", "Use four splits [[1]]"]
    q = thread_question("That didn't work, any other idea?", "citebot", thread=thread, follow_up=True)
    assert (q.opening, q.earlier_question) == ("Opening post about the shadows.", "how do I set cascades?")
    assert "four splits" not in q.text


def test_thread_question_shapes() -> None:
    alone = thread_question("How do I load a scene from XML?", "citebot")
    assert (alone.shape, alone.text) == ("direct", "How do I load a scene from XML?")
    thread = [
        "The opening post asks about physics jitter with many bodies.",
        "A reply: try a smaller time step.",
    ]
    reply = thread_question("@citebot can you help with this one?", "citebot", title="Jitter", thread=thread)
    assert (reply.shape, reply.opening, reply.replied_to) == ("reply", thread[0], thread[1])


def test_quote_blocks_read_who_and_which_post_and_skip_code() -> None:
    raw = (
        '[quote="Bob Smith, post:3, topic:42, username:bob"]\nuse the old API\n'
        "[quote]inner[/quote]\n[/quote]\n[code][quote=x]not a quote[/quote][/code]\n"
        "[quote=carol]plain[/quote] and [quote]unclosed"
    )
    assert quote_blocks(raw) == [
        Quote("bob", topic_id=42, post_number=3, text="use the old API\n[quote]inner[/quote]"),
        Quote("carol", text="plain"),
    ]
    assert markdown_quotes("> error: precision\n> line two\ntext\n>\n> other") == [
        "error: precision\nline two",
        "other",
    ]


def _topic(forum: FakeForum) -> None:
    forum.add_topic(5, "Sound stops after loading a scene", "sound-stops")
    forum.add_post(501, 5, 1, "When I load a new scene every sound stops, even the music.", username="alice")
    forum.add_post(502, 5, 2, "Keep the music node in a scene you never unload.", username="bob", user_id=8)


def test_read_question_of_a_reply_takes_the_thread_from_the_topics_cooked_posts() -> None:
    forum = FakeForum()
    _topic(forum)
    post = forum.add_post(
        503,
        5,
        3,
        '[quote="bob, post:2, topic:5"]\nKeep the music node in a scene\n[/quote]\n'
        "@citebot can you help with this one?",
        username="carol",
        user_id=9,
        reply_to_post_number=2,
    )
    q = read_question(post, forum.get_topic(5), forum, "citebot")
    assert q.shape == "reply"
    assert q.own == "can you help with this one?"
    assert q.title == "Sound stops after loading a scene"
    assert q.quoted == "Keep the music node in a scene"
    assert q.replied_to == "Keep the music node in a scene you never unload."
    assert q.opening == "When I load a new scene every sound stops, even the music."
    assert pointed_posts(post) == (2,)


def test_read_question_of_a_new_topic_uses_its_title() -> None:
    forum = FakeForum()
    forum.add_topic(6, "Cascaded shadows for the sun light", "cascaded")
    post = forum.add_post(601, 6, 1, "@citebot how do I set them up?")
    q = read_question(post, forum.get_topic(6), forum, "citebot")
    assert (q.shape, q.text) == ("new_topic", "Cascaded shadows for the sun light\n\nhow do I set them up?")


def test_read_question_of_a_follow_up_never_reads_the_bots_words() -> None:
    forum = FakeForum()
    forum.add_topic(6, "Cascaded shadows for the sun light", "cascaded")
    forum.add_post(601, 6, 1, "@citebot how do I set them up?")
    bot = forum.create_post(6, "Set the light's cascade splits [[1]]", reply_to_post_number=1)
    assert isinstance(bot, ForumPost)
    post = forum.add_post(
        603,
        6,
        3,
        f'[quote="citebot, post:{bot.post_number}, topic:6"]\nSet the light\'s cascade splits\n[/quote]\n'
        "That didn't work, any other idea?",
        reply_to_post_number=bot.post_number,
    )
    earlier = EarlierAnswer(601, 1, bot.post_number, (9001,))
    q = read_question(post, forum.get_topic(6), forum, "citebot", earlier)
    assert q.shape == "follow_up"
    assert q.earlier_question == "how do I set them up?"
    assert (q.quoted, q.replied_to, q.opening) == ("", "", "")
    assert q.already_cited == (9001,)
    assert "cascade splits" not in q.text


def test_read_question_reads_a_post_outside_the_first_chunk_by_number() -> None:
    forum = FakeForum()
    _topic(forum)
    post = forum.add_post(530, 5, 30, "@citebot can you help with this one?", reply_to_post_number=2)
    topic = ForumTopic(5, "Sound stops after loading a scene", "sound-stops", 1, posts=())
    q = read_question(post, topic, forum, "citebot")
    assert q.replied_to == "Keep the music node in a scene you never unload."
    assert forum.by_number_calls == 2  # the post replied to and the opening post


@pytest.mark.parametrize(
    ("own", "alone"),
    [
        ("how do I stop terrain LOD popping?", True),
        ("comment compiler les shaders pour Android ?", True),
        ("can you help with this one?", False),  # names nothing
        ("That didn't work, any other idea?", False),  # points back
        ("does it also happen with GLES3 on iOS?", False),
        ("une idée ? même erreur après avoir tout nettoyé", False),
    ],
)
def test_a_question_stands_alone_when_it_names_a_subject_and_points_at_nothing(own: str, alone: bool) -> None:
    assert stands_alone(own) is alone


def test_a_reply_that_stands_alone_is_asked_as_written_with_what_it_quoted() -> None:
    q = build_question(
        "@citebot how do I stop terrain LOD popping?",
        "citebot",
        title="Simple FPS counter",
        quoted=["the LOD bias did nothing for me"],
        replied_to="Nice, the debug hud also shows the frame rate.",
        opening="I added a simple FPS counter to the samples.",
        shape="reply",
    )
    assert q.text == "how do I stop terrain LOD popping?\n\nthe LOD bias did nothing for me"
    new_topic = build_question(
        "@citebot how do I stop terrain LOD popping?", "citebot", title="LOD", shape="new_topic"
    )
    assert new_topic.title == "LOD"  # a new topic's title is the member's own
