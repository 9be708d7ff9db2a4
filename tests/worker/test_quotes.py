"""Quotes of posts in raw and cooked (``worker.quotes``), held to what Discourse writes."""

from __future__ import annotations

from worker.quotes import (
    Quote,
    cooked_quotes,
    plain,
    post_quotes,
    quote_attrs,
    quoted_lines,
    quotes_user,
    raw_quotes,
)

# discourse-markdown-it/src/features/quotes.js: the aside of an attributed quote, then an unattributed one.
COOKED = (
    '<aside class="quote no-group" data-username="bob" data-post="2" data-topic="10" data-full="true">\n'
    '<div class="title">\n<div class="quote-controls"></div>\n<img alt="" class="avatar"> bob:</div>\n'
    "<blockquote>\n<p>Use highp.</p>\n</blockquote>\n</aside>\n"
    '<aside class="onebox allowlistedgeneric" data-onebox-src="https://x.org"></aside>\n'
    '<aside class="quote group-staff"><blockquote><p>pasted</p></blockquote></aside>\n<p>works, thanks</p>'
)


def test_cooked_quotes_read_the_aside_attributes_and_skip_oneboxes() -> None:
    assert cooked_quotes(COOKED) == (Quote("bob", 10, 2), Quote())
    assert cooked_quotes("<p>no quote</p>") == ()
    assert quote_attrs('class="onebox"') is None
    assert quote_attrs("class='quote' data-post=0 data-topic=x") == Quote()


def test_raw_quotes_parse_the_composer_attribution() -> None:
    raw = (
        '[quote="bob, post:2, topic:10, full:true"]\nUse highp.\n[/quote]\n'
        "[quote]pasted[/quote]\n"
        '[QUOTE="Bob Builder, post:3, topic:10, username:bobb"]x[/QUOTE]\n'
        "[quote=alice]y[/quote]"
    )
    assert raw_quotes(raw) == (
        Quote("bob", 10, 2),
        Quote(),
        Quote("bobb", 10, 3),
        Quote("alice"),
    )
    assert Quote("bob", 10, 2).of_post
    assert not Quote("alice").of_post
    assert raw_quotes("no brackets") == ()


def test_post_quotes_prefers_cooked_and_quotes_user_is_case_blind() -> None:
    assert post_quotes(COOKED, '[quote="eve, post:1, topic:1"]x[/quote]') == cooked_quotes(COOKED)
    assert post_quotes("", '[quote="CiteBot, post:3, topic:7"]x[/quote]') == (Quote("CiteBot", 7, 3),)
    assert quotes_user("", '[quote="CiteBot, post:3, topic:7"]x[/quote]', {"citebot"})
    assert not quotes_user(COOKED, None, {"citebot"})


def test_quoted_lines_are_what_the_member_has_read() -> None:
    raw = (
        '[quote="citebot, post:3, topic:12"]\nHere is what the forum\'s posts say:\n\n'
        "- Add a precision qualifier, `mediump float` fixes it. [1](http://f/t/s/10/2)\n[/quote]\n\n"
        "That did not work, [quote]short[/quote] any other idea?"
    )
    assert quoted_lines(raw) == (
        "here is what the forum's posts say:",
        "add a precision qualifier, mediump float fixes it.",
    )
    assert quoted_lines("no quote at all") == ()
    assert plain("- Add a precision qualifier, mediump float fixes it. [[1]]").startswith(
        "add a precision qualifier, mediump float fixes it."
    )


def test_what_the_member_quoted_is_not_handed_back() -> None:
    from tests.worker.generation.conftest import make_source
    from worker.pipeline import _unquoted

    quoted = quoted_lines("[quote]\n- Add a precision qualifier, `mediump float` fixes it. [1](u)\n[/quote]")
    again = make_source(1, "Shader", "Add a precision qualifier, mediump float fixes it. On GLES only.")
    question = make_source(
        2,
        "Shader",
        "It fails on Android.",
        context=("#2: Add a precision qualifier, mediump float fixes it.",),
    )
    other = make_source(3, "Shader", "Set highp in the fragment shader instead.")
    kept = _unquoted([again, question, other], quoted)
    assert [s.n for s in kept] == [2, 3]
    assert kept[0].context == ()
