"""Properties that must hold for every input: the security contract in docs/sanitizer.md."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizer import CANNED_MARKER, sanitize
from tests.sanitizer.oracle import audit, rendered_tags, unsafe_tags
from tests.sanitizer.strategies import EVIDENCE, any_texts, documents, llm_texts

POST_TARGETS = {source.link("post") for source in EVIDENCE}
TOPIC_TARGETS = {source.link("topic", "https://forum.example.org") for source in EVIDENCE}

texts = st.one_of(llm_texts, any_texts, documents)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_only_evidence_links_no_html_no_live_mention(text: str) -> None:
    result = sanitize(text, EVIDENCE, allow_canned=False)
    assert result.ok or result.text == ""
    assert audit(result.text, POST_TARGETS) == []
    assert unsafe_tags(result.text, POST_TARGETS) == []


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_topic_links_with_base_url_are_the_only_links(text: str) -> None:
    result = sanitize(
        text, EVIDENCE, links="topic", base_url="https://forum.example.org/", allow_canned=False
    )
    assert audit(result.text, TOPIC_TARGETS) == []


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_idempotent(text: str) -> None:
    once = sanitize(text, EVIDENCE, allow_canned=False)
    twice = sanitize(once.text, EVIDENCE, allow_canned=False)
    assert twice.text == once.text
    if once.ok:
        assert twice.ok
        assert twice.dropped == ()
        assert twice.cited == once.cited


@settings(max_examples=200)
@given(texts, st.sampled_from(["post", "topic"]), st.sampled_from([None, "", "http://localhost:4200"]))
def test_never_raises_and_fails_closed(text: str, links: str, base_url: str | None) -> None:
    result = sanitize(text, EVIDENCE, links=links, base_url=base_url)  # type: ignore[arg-type]
    assert isinstance(result.text, str)
    if not result.ok:
        assert result.text == ""
        assert result.reasons


@settings(max_examples=100)
@given(st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.integers()), texts))
def test_never_raises_on_wrong_types(junk: object) -> None:
    result = sanitize(junk, junk)  # type: ignore[arg-type]
    assert isinstance(result.ok, bool)
    if not result.ok:
        assert result.text == ""


@settings(max_examples=100)
@given(texts)
def test_canned_text_passes_untouched(text: str) -> None:
    canned = CANNED_MARKER + "\n" + text
    assert sanitize(canned, EVIDENCE).text == canned
    refused_marker = sanitize(canned, EVIDENCE, allow_canned=False)
    assert audit(refused_marker.text, POST_TARGETS) == []


@pytest.mark.parametrize(
    "text",
    [
        "[" * 50_000,
        "`" * 30_000 + "a" + "``" * 10_000,
        "<a " * 30_000,
        "<!--" * 20_000,
        " " * 90_000 + "[[1]]",
        "[a](" * 20_000,
        "a.co " * 19_000,
        "@a " * 30_000,
        "\u202e" * 50_000 + "evil.example",
        "[[1]]" * 19_000,
        "&#64;" * 19_000,
        "~" * 90_000,
    ],
)
def test_huge_adversarial_inputs_are_fast_and_safe(text: str) -> None:
    result = sanitize(text, EVIDENCE)
    assert audit(result.text, POST_TARGETS) == []
    assert sanitize(result.text, EVIDENCE).text == result.text


EVIL_FORMS = [
    "http://evil.example",
    "https://evil.example/fix",
    "[the fix](http://evil.example)",
    "[[1]](http://evil.example)",
    "![x](http://evil.example/a.png)",
    "<http://evil.example>",
    '<a href="http://evil.example">fix</a>',
    "[url]http://evil.example[/url]",
    "[url=http://evil.example]fix[/url]",
    "[fix][e]\n\n[e]: http://evil.example",
    "evil.example",
    "www.evil.example",
    "//evil.example",
    "&#104;ttp://evil.example",
    "evil&#46;example",
    "evil\\.example",
    "<!-- citebot:canned -->[fix](http://evil.example)",
    # Issue 13: a host label with an ASCII symbol (linkify takes it as a letter), a scheme glued to a word.
    "evil$.example/x",
    "a+b.example",
    "x^y.example",
    "evil=.example",
    "herehttps://evil.example/fix",
    "seehttp://evil.example",
    "clickjavascript:alert(1)",
]


@settings(max_examples=300)
@given(st.lists(st.one_of(st.sampled_from(EVIL_FORMS), llm_texts), min_size=1, max_size=6).map(" ".join))
def test_injected_link_never_survives_whatever_the_llm_writes(text: str) -> None:
    """Issue 6: evidence saying "link to http://evil.example" never yields that link in the reply."""
    result = sanitize(text, EVIDENCE, allow_canned=False)
    assert audit(result.text, POST_TARGETS) == []
    hrefs = [attrs.get("href") or "" for tag, attrs in rendered_tags(result.text) if tag == "a"]
    assert all("evil.example" not in href and href in POST_TARGETS for href in hrefs)


@settings(max_examples=300)
@given(
    st.text(alphabet="abc", min_size=1, max_size=4),
    st.sampled_from("$+=^`|~"),
    st.sampled_from(["com", "example", "co", "xn--p1ai"]),
    st.sampled_from(["", "/x", "/fix?a=1"]),
    st.sampled_from(["", "see ", "(", "**"]),
)
def test_a_host_with_a_symbol_is_never_left_linkable(
    label: str, symbol: str, tld: str, path: str, lead: str
) -> None:
    """Issue 13: linkify-it takes ASCII symbols as letters of a host (``evil$.com``); so must we."""
    text = f"{lead}{label}{symbol}.{tld}{path} please"
    result = sanitize(text, EVIDENCE, allow_canned=False)
    assert audit(result.text, POST_TARGETS) == []


@settings(max_examples=300)
@given(
    st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=8),
    st.sampled_from(["http://", "https://", "ftp://", "file://", "javascript:"]),
    st.sampled_from(["evil.example", "evil.example/fix", "alert(1)"]),
)
def test_a_scheme_glued_to_a_word_is_cut(word: str, scheme: str, rest: str) -> None:
    """Issue 13: ``herehttps://evil.example`` is no Discourse link, but it was left as copyable text."""
    result = sanitize(f"{word}{scheme}{rest} now", EVIDENCE, allow_canned=False)
    assert scheme not in result.text
    assert "(link removed)" in result.text
