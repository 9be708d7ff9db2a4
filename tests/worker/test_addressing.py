from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.addressing import BotIdentity, cooked_mentions, decide, mentions, visible_text
from worker.domain import ForumPost

BOT = BotIdentity("citebot", user_id=-5, answer_pms=False)


def post(raw: str | None = "hello", **fields: object) -> ForumPost:
    base = ForumPost(id=10, topic_id=3, post_number=2, username="alice", user_id=42, raw=raw)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def m(name: str = "citebot") -> str:
    """A mention as Discourse cooks it for an existing user."""
    return f'<a class="mention" href="/u/{name}">@{name}</a>'


# One table for both parsers: the raw a member writes, the cooked HTML Discourse makes of it, and
# whether Discourse notifies @citebot (PostAnalyzer#raw_mentions: `.mention` elements outside `pre`,
# quotes, oneboxes and elided blocks).
CASES: list[tuple[str, str, bool]] = [
    ("@citebot how do I compile?", f"<p>{m()} how do I compile?</p>", True),
    ("hey @CiteBot, help", f"<p>hey {m('CiteBot')}, help</p>", True),
    ("ask @citebot.", f"<p>ask {m()}.</p>", True),
    ("(@citebot)", f"<p>({m()})</p>", True),
    ("@citebot2 is another user", f"<p>{m('citebot2')} is another user</p>", False),
    ("@citebot-old is another user", f"<p>{m('citebot-old')} is another user</p>", False),
    ("@citebot.old is another user", f"<p>{m('citebot.old')} is another user</p>", False),
    ("mail me@citebot please", "<p>mail me@citebot please</p>", False),
    ("citebot without at", "<p>citebot without at</p>", False),
    ("`@citebot` in inline code", "<p><code>@citebot</code> in inline code</p>", False),
    (
        "``x `@citebot` y`` in double backticks",
        "<p><code>x `@citebot` y</code> in double backticks</p>",
        False,
    ),
    (
        "```\n@citebot in a fence\n```",
        '<pre><code class="lang-auto">@citebot in a fence\n</code></pre>',
        False,
    ),
    (
        "~~~python\n@citebot\n~~~\n",
        '<pre data-code-wrap="python"><code class="lang-python">@citebot\n</code></pre>',
        False,
    ),
    (
        "text\n\n    @citebot indented code\n",
        "<p>text</p>\n<pre><code>@citebot indented code\n</code></pre>",
        False,
    ),
    (
        "> @citebot quoted\n\nmy own words",
        f"<blockquote>\n<p>{m()} quoted</p>\n</blockquote>\n<p>my own words</p>",
        True,
    ),
    (
        '[quote="bob, post:1, topic:3"]\n@citebot said\n[/quote]\nthanks',
        '<aside class="quote no-group" data-username="bob" data-post="1" data-topic="3">\n'
        '<div class="title">\n<div class="quote-controls"></div>\nbob:</div>\n'
        f"<blockquote>\n<p>{m()} said</p>\n</blockquote>\n</aside>\n<p>thanks</p>",
        False,
    ),
    (
        "[quote]\n[quote]\n@citebot\n[/quote]\n[/quote]\n",
        f'<aside class="quote no-group">\n<blockquote>\n<aside class="quote no-group">\n<blockquote>\n'
        f"<p>{m()}</p>\n</blockquote>\n</aside>\n</blockquote>\n</aside>",
        False,
    ),
    (
        "[quote]\nold\n[/quote]\n@citebot new question",
        f'<aside class="quote no-group">\n<blockquote>\n<p>old</p>\n</blockquote>\n</aside>\n'
        f"<p>{m()} new question</p>",
        True,
    ),
    (
        "```\ncode\n```\n@citebot after the fence",
        f'<pre><code class="lang-auto">code\n</code></pre>\n<p>{m()} after the fence</p>',
        True,
    ),
    # An unclosed BBCode tag is text in Discourse, and so is what follows it.
    ("[quote]\nunclosed @citebot", f"<p>[quote]<br>\nunclosed {m()}</p>", True),
    ("stray [/quote] then @citebot", f"<p>stray [/quote] then {m()}</p>", True),
    (
        "[code]\n@citebot in a code block\n[/code]",
        '<pre><code class="lang-auto">@citebot in a code block\n</code></pre>',
        False,
    ),
    ("<!-- @citebot -->\nhello", "<!-- @citebot -->\n<p>hello</p>", False),
    ("look: <!-- @citebot --> hidden", "<p>look: <!-- @citebot --> hidden</p>", False),
    ("<code>@citebot</code> in html", "<p><code>@citebot</code> in html</p>", False),
    ("<div>\n@citebot in an html block\n</div>", "<div>\n@citebot in an html block\n</div>", False),
    ("\\@citebot escaped", "<p>@citebot escaped</p>", False),
    ("\\\\@citebot after an escaped backslash", f"<p>\\{m()} after an escaped backslash</p>", True),
    ("[ask @citebot](https://example.com)", '<p><a href="https://example.com">ask @citebot</a></p>', False),
    ("<PRE\n@citebot in a raw html block", "<PRE\n@citebot in a raw html block", False),
    ("<b>@citebot</b> in bold html", f"<p><b>{m()}</b> in bold html</p>", True),
    ('<img alt="@citebot" src="x.png"> image', '<p><img alt="@citebot" src="x.png"> image</p>', False),
    ("**@citebot** in bold", f"<p><strong>{m()}</strong> in bold</p>", True),
    (
        "https://example.com/t/x/1\n\nand @citebot",
        '<aside class="onebox allowlistedgeneric"><article class="onebox-body">'
        f"<p>{m()} in a onebox</p></article></aside>\n<p>and {m()}</p>",
        True,
    ),
    (
        "https://example.com/t/x/1",
        '<aside class="onebox allowlistedgeneric"><article class="onebox-body">'
        f"<p>{m()}</p></article></aside>",
        False,
    ),
]


@pytest.mark.parametrize(("raw", "cooked", "expected"), CASES)
def test_raw_parser_follows_discourse(raw: str, cooked: str, expected: bool) -> None:
    assert mentions(raw, "citebot") is expected


@pytest.mark.parametrize(("raw", "cooked", "expected"), CASES)
def test_cooked_parser_follows_discourse(raw: str, cooked: str, expected: bool) -> None:
    assert cooked_mentions(cooked, "citebot") is expected


def test_the_cooked_html_decides_when_the_webhook_has_it() -> None:
    quoted = post("@citebot", cooked=f'<aside class="quote"><blockquote><p>{m()}</p></blockquote></aside>')
    assert decide(quoted, BOT).reason == "not_addressed"
    assert decide(post("`@citebot`", cooked=f"<p>{m()}</p>"), BOT).reason == "mention"
    assert decide(post("@citebot hi", cooked=""), BOT).reason == "mention"  # the poller: raw only


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"raw": "@citebot hi"}, "mention"),
        ({"raw": "thanks", "reply_to_username": "CiteBot"}, "reply"),
        ({"raw": "thanks", "reply_to_username": "bob"}, "not_addressed"),
        # A quoting reply: Discourse names no reply_to_user; the worker confirms the parent's author.
        ({"raw": "[quote]x[/quote] and?", "reply_to_post_number": 3}, "reply_to_post"),
        ({"raw": "x", "reply_to_post_number": 3, "reply_to_username": "bob"}, "not_addressed"),
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


# No "<": a line starting "<pre" (or "<div", ...) opens an HTML block, whose text is no mention.
@given(st.text(alphabet=st.characters(blacklist_characters="@`[>~< \t"), max_size=80))
def test_mention_survives_surrounding_plain_text(text: str) -> None:
    raw = f"{text}\n\n@citebot {text}"
    assert mentions(raw, "citebot")


REPRODUCER = "@someone " + "`" * 320 + "a`" * 4000  # issue 13: ~20 s in the old _INLINE_CODE


@pytest.mark.parametrize("raw", [REPRODUCER, "@someone " + "`" * 1280 + "a`" * 15_300])
def test_the_backtick_reproducer_is_decided_within_budget(raw: str) -> None:
    from tests.worst_case import budget_s, elapsed

    # the best of three calls: one call can lose half a second to a loaded CI machine's scheduler,
    # while a backtracking pattern would take seconds on every call
    best = min(elapsed(lambda: mentions(raw + " @citebot", "citebot")) for _ in range(3))
    assert best < budget_s(len(raw))
    assert mentions(raw + " @citebot", "citebot")
    assert not mentions(raw, "citebot")
