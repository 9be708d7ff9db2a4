"""What enters the index as evidence (``backfill.evidence``): pure rules, no I/O."""

from __future__ import annotations

import dataclasses

import pytest

from backfill.evidence import REPLY_WINDOW, addressed_to, ineligibility
from backfill.sources import SourcePost
from tests.backfill.conftest import make_post

BOT = ("citebot",)
MENTION = '<p><a class="mention" href="/u/citebot">@citebot</a> how do I load a model?</p>'
QUOTED_MENTION = (
    '<aside class="quote" data-username="al"><blockquote><p><a class="mention" href="/u/citebot">'
    "@citebot</a> how do I load a model?</p></blockquote></aside><p>Use ResourceCache.</p>"
)

BOT_QUOTE = (
    '<aside class="quote no-group" data-username="citebot" data-post="3" data-topic="7">\n'
    '<div class="title">\n<div class="quote-controls"></div>\n citebot:</div>\n'
    "<blockquote>\n<p>Use ResourceCache.</p>\n</blockquote>\n</aside>\n"
    "<p>That did not work, any other idea?</p>"
)


def first_post(replies: tuple[SourcePost, ...] | None, **fields: object) -> SourcePost:
    return dataclasses.replace(make_post(1001, 7, **fields), post_number=1, replies=replies)  # type: ignore[arg-type]


def reply(post_id: int, **fields: object) -> SourcePost:
    return dataclasses.replace(make_post(post_id, 7, **fields), post_number=post_id % 100)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "addressed"),
    [
        ({"raw": "@citebot how do I load a model?", "cooked": ""}, True),
        ({"raw": "@CiteBot, how do I load a model?", "cooked": ""}, True),
        ({"raw": "> @citebot said\n\nUse ResourceCache.", "cooked": ""}, True),  # Discourse notifies in ">"
        ({"raw": "Type `@citebot` to ask it.", "cooked": ""}, False),  # code
        ({"raw": "Ask @citebot2 or mail me@citebot.org", "cooked": ""}, False),  # someone else, an address
        ({"cooked": MENTION}, True),
        ({"cooked": QUOTED_MENTION}, False),  # a quoted post ([quote]) does not notify
        ({"cooked": '<p><a class="mention" href="/u/al">@al</a> thanks</p>'}, False),
        ({"reply_to_username": "CiteBot"}, True),  # a reply to one of the bot's posts
        ({"reply_to_username": "al"}, False),
        # A quote-reply to the bot: Discourse leaves ``reply_to_user`` out (suppress_reply_when_quoting),
        # the quote of the bot's post says whom it answers (cooked as quotes.js writes it, or raw).
        ({"cooked": BOT_QUOTE, "reply_to_post_number": 3}, True),
        ({"raw": '[quote="CiteBot, post:3, topic:7"]\nUse X.\n[/quote]\nDid not work', "cooked": ""}, True),
        ({"cooked": BOT_QUOTE.replace("citebot", "al")}, False),  # quoting a member is not addressing
        ({"cooked": '<aside class="quote no-group"><blockquote><p>x</p></blockquote></aside>'}, False),
    ],
)
def test_addressed_to_the_bot(fields: dict[str, object], addressed: bool) -> None:
    post = make_post(5, **fields)  # type: ignore[arg-type]
    assert addressed_to(post, BOT) is addressed
    assert (ineligibility(post, excluded_authors=BOT) == "addressed_to_bot") is addressed


def test_a_first_post_nobody_answered_is_an_open_question() -> None:
    assert ineligibility(first_post(()), excluded_authors=BOT) == "open_question"
    # Replies that are not evidence do not answer it: the bot's own, one addressed to the bot, a
    # deleted one, a moderator action.
    not_answers = (
        reply(1002, username="citebot"),
        reply(1003, raw="@citebot any idea?", cooked=""),
        reply(1004, deleted=True),
        reply(1005, post_type=3),
    )
    assert ineligibility(first_post(not_answers), excluded_authors=BOT) == "open_question"


def test_an_answered_first_post_stays_as_the_context_of_its_answers() -> None:
    answered = first_post((reply(1002, username="citebot"), reply(1003)))
    assert ineligibility(answered, excluded_authors=BOT) is None
    # The topic author's own follow-up with the fix is an answer too.
    assert ineligibility(first_post((reply(1002, username="alice"),)), excluded_authors=BOT) is None


def test_replies_unknown_keeps_the_first_post_and_later_posts_are_never_open_questions() -> None:
    assert ineligibility(first_post(None), excluded_authors=BOT) is None
    assert ineligibility(dataclasses.replace(reply(1002), replies=()), excluded_authors=BOT) is None


def test_only_the_first_page_of_replies_is_read() -> None:
    late = (*(reply(1002 + i, username="citebot") for i in range(REPLY_WINDOW)), reply(1099))
    assert ineligibility(first_post(late), excluded_authors=BOT) == "open_question"


def test_a_first_post_addressed_to_the_bot_is_never_evidence_even_when_answered() -> None:
    asked = first_post((reply(1002),), cooked=MENTION)
    assert ineligibility(asked, excluded_authors=BOT) == "addressed_to_bot"


def test_the_bots_own_post_is_left_out_before_anything_else() -> None:
    assert ineligibility(make_post(5, username="CITEBOT"), excluded_authors=BOT) == "bot_author"
