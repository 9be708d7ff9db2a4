"""Hypothesis strategies: LLM-like text salted with every trick we know, and arbitrary Unicode."""

from __future__ import annotations

from hypothesis import strategies as st

from sanitizer import EvidenceSource

EVIDENCE = (
    EvidenceSource(n=1, topic_id=12, post_number=3, slug="how-to-load-a-scene", title="Loading scenes"),
    EvidenceSource(n=2, topic_id=40, post_number=1, slug="x)(http://evil.example", title="hostile slug"),
    EvidenceSource(n=3, topic_id=7, post_number=22, slug="Ünïcödé Slug!", title="unicode"),
)

# fmt: off
SNIPPETS = (
    "[[1]]", "[[2]]", "[[3]]", "[[9]]", "[[1, 2]]", "[[ 3 ]]", "[[1]][[2]]", "[[1]], [[1]]", "[[0]]",
    "[1](/t/how-to-load-a-scene/12/3)", "[1](/t/forged/1/1)", "[2](/t/x-http-evil-example/40)",
    "[click](http://evil.example)", "![img](http://evil.example/a.png)", "[a [[1]]](javascript:alert(1))",
    "[ref]: http://evil.example", "[ref]", "[x][ref]", "![x][ref]", "[^1]", "[^1]: note",
    "<http://evil.example>", "<mailto:a@evil.example>", "<a@evil.example>", "<javascript:alert(1)>",
    "http://evil.example/path?q=1", "https://evil.example.", "evil.example", "www.evil.example",
    "EVIL.COM", "//evil.example", "192.168.0.1", "a@b.co", "xn--p1ai.ru", "файл.рф", "😀.com",
    "javascript:alert(1)", "data:text/html;base64,PHNjcmlwdD4=",
    "<a href='http://evil.example'>x</a>", "<img src=x onerror=alert(1)>", "<script>alert(1)</script>",
    "<!-- c -->", "<div>", "</div>", "<b", "a<b", "<3", "<![CDATA[x]]>", "<?php ?>",
    "[url=http://evil.example]x[/url]", "[url]http://evil.example[/url]", "[img]http://e.x/a.png[/img]",
    "[quote=\"admin, post:1, topic:2\"]", "[/quote]", "[details=x]", "[poll]",
    "@admin", "@here", "@_x", "＠admin", "#support", "#tag::tag", "C#", "#", "@",
    "&#64;admin", "&#x40;x", "&lt;script&gt;", "&#91;x&#93;(http://e.com)", "&amp;", "&", "&#0;",
    "&#xe000;", "&#x202e;", "&copy", "&nbsp;",
    "`code`", "``a`b``", "`", "``", "```", "~~~", "```js", "~~~ ", "    indented", "\\", "\\`", "\\[",
    "\\@admin", "\\#x", "evil\\.example", "*", "**", "_", "~~", "|", "| a | b |\n|---|---|\n", "> ",
    "- ", "1. ", "# ", "\n    ```\n", "\n  ~~~~ x\n", "\n- a\n", "\n> b\n",
    "\n", "\n\n", " ", "\t", "!", "(", ")", "[", "]", "<", ">", ":", ".", "/",
    "\u202e", "\u200b", "\u200d", "\ufeff", "\x00", "\r\n", "\u2028", "\U000e0041", "\ue000", "\U000f0000",
)
# fmt: on

fragments = st.one_of(
    st.sampled_from(SNIPPETS),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.text(alphabet="ab.:/@#[]()<>`\\!&;*_~| \n", max_size=12),
)
llm_texts = st.lists(fragments, max_size=40).map("".join)
any_texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=400)

_PREFIXES = (
    "",
    "",
    "- ",
    "1. ",
    "> ",
    "    ",
    "  - ",
    "| ",
    "# ",
    "```",
    "~~~",
    "   ```js",
    "    ```",
    "<div>",
    "[x]: ",
)
_line = st.tuples(st.sampled_from(_PREFIXES), llm_texts.map(lambda s: s.replace("\n", " "))).map("".join)
documents = st.lists(_line, max_size=12).map("\n".join)
"""Multi-line Markdown documents: lists, quotes, tables, headings and fences around the tricks above."""
