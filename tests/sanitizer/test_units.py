"""Unit tests of each pass, the evidence type and the fail-closed paths."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import pytest

from sanitizer import CANNED_MARKER, EvidenceError, EvidenceSource, from_dicts, normalize_slug, sanitize
from sanitizer.blocks import Block, render_fence, split_blocks
from sanitizer.codespans import render_code_span
from sanitizer.evidence import normalize_base_url
from sanitizer.neutralize import decode_entities

EVIDENCE = (EvidenceSource(n=1, topic_id=12, post_number=3, slug="scene"),)
# The package re-exports a function named like the module: import the module itself.
sanitize_module = importlib.import_module("sanitizer.sanitize")


def test_gate_and_sanitizer_agree_on_the_canned_marker() -> None:
    import gate

    assert gate.CANNED_MARKER == CANNED_MARKER


@pytest.mark.parametrize(
    ("slug", "expected"),
    [
        ("How to load a scene?", "how-to-load-a-scene"),
        ("x)(http://evil.example", "x-http-evil-example"),
        ("Ünïcödé Slug!", "unicode-slug"),
        ("../../admin", "admin"),
        ("日本語", "topic"),
        ("", "topic"),
        ("a" * 200, "a" * 80),
    ],
)
def test_normalize_slug(slug: str, expected: str) -> None:
    assert normalize_slug(slug) == expected


def test_links_by_grain_and_base() -> None:
    source = EvidenceSource(n=2, topic_id=40, post_number=7, slug="Physics Raycast", title="t")
    assert source.link("post") == "/t/physics-raycast/40/7"
    assert source.link("topic", "https://f.example") == "https://f.example/t/physics-raycast/40"


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        (None, ""),
        ("", ""),
        ("https://forum.example.com/", "https://forum.example.com"),
        ("http://localhost:4200", "http://localhost:4200"),
        ("https://example.com/community/", "https://example.com/community"),
    ],
)
def test_base_url_accepted(base: str | None, expected: str) -> None:
    assert normalize_base_url(base) == expected


@pytest.mark.parametrize(
    "base",
    [
        "javascript:alert(1)",
        "ftp://x.example",
        "https://x.example/a b",
        "https://x.example/)",
        "https://x?q=1",
        "//x",
    ],
)
def test_base_url_refused(base: str) -> None:
    with pytest.raises(EvidenceError):
        normalize_base_url(base)
    assert sanitize("[[1]]", EVIDENCE, base_url=base).reasons == ("invalid-base-url",)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("[]", "list of objects"),
        ({"n": 1}, "list of objects"),
        ([1], "expected an object"),
        ([{"n": 1, "topic_id": 2}], "missing post_number, slug"),
        ([{"n": 0, "topic_id": 2, "post_number": 1, "slug": "s"}], "n must be a positive integer"),
        ([{"n": True, "topic_id": 2, "post_number": 1, "slug": "s"}], "n must be a positive integer"),
        ([{"n": 1, "topic_id": "2", "post_number": 1, "slug": "s"}], "topic_id must be"),
        ([{"n": 1, "topic_id": 2, "post_number": 1, "slug": None}], "slug and title must be strings"),
        ([{"n": 1, "topic_id": 2, "post_number": 1, "slug": "s", "title": 3}], "slug and title"),
        (
            [{"n": 1, "topic_id": 2, "post_number": 1, "slug": "s"}] * 2,
            "source number 1 appears twice",
        ),
    ],
)
def test_from_dicts_refuses_bad_evidence(items: object, message: str) -> None:
    with pytest.raises(EvidenceError, match=message):
        from_dicts(items)  # type: ignore[arg-type]


def test_from_dicts_ignores_extra_keys_and_defaults_title() -> None:
    (source,) = from_dicts([{"n": 1, "topic_id": 2, "post_number": 3, "slug": "s", "post_id": 9}])
    assert source == EvidenceSource(n=1, topic_id=2, post_number=3, slug="s", title="")


def test_sanitize_accepts_worker_sources() -> None:
    from worker.domain import Source

    source = Source(n=4, post_id=1, topic_id=9, post_number=2, slug="Raycast", title="t", excerpt="e")
    assert sanitize("[[4]]", [source]).text == "[4](/t/raycast/9/2)"


def test_sanitize_accepts_dicts_and_sources_but_not_duplicates() -> None:
    mixed: list[EvidenceSource | Mapping[str, object]] = [
        EVIDENCE[0],
        {"n": 2, "topic_id": 5, "post_number": 1, "slug": "b"},
    ]
    assert sanitize("[[1]] [[2]]", mixed).text == "[1](/t/scene/12/3), [2](/t/b/5/1)"
    assert sanitize("x", [EVIDENCE[0], EVIDENCE[0]]).reasons == ("invalid-evidence",)
    assert sanitize("x", "not a list").reasons == ("invalid-evidence",)  # type: ignore[arg-type]
    assert sanitize("x", [{"n": "1"}]).reasons == ("invalid-evidence",)


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda: sanitize(None, EVIDENCE), "invalid-input"),  # type: ignore[arg-type]
        (lambda: sanitize("x" * 100_001, EVIDENCE), "too-long"),
        (lambda: sanitize("x", EVIDENCE, links="thread"), "invalid-links"),  # type: ignore[arg-type]
        (lambda: sanitize("  \n\t ", EVIDENCE), "empty"),
        (lambda: sanitize("[[7]]", EVIDENCE), "empty"),
        (lambda: sanitize("<img src=x>", EVIDENCE), "empty"),
    ],
)
def test_fails_closed(call: object, reason: str) -> None:
    result = call()  # type: ignore[operator]
    assert (result.ok, result.text, result.reasons) == (False, "", (reason,))


def test_output_longer_than_the_limit_is_refused() -> None:
    assert sanitize("[" * 60_000, EVIDENCE).reasons == ("too-long",)


def test_unexpected_error_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(sanitize_module, "_transform", explode)
    result = sanitize("hello", EVIDENCE)
    assert (result.ok, result.text, result.reasons) == (False, "", ("error",))


def test_output_that_is_not_a_fixed_point_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    outputs = iter(["first", "second"])
    monkeypatch.setattr(sanitize_module, "_transform", lambda *args: next(outputs))
    assert sanitize("hello", EVIDENCE).reasons == ("not-idempotent",)


def test_canned_marker_only_at_the_very_start() -> None:
    canned = f"{CANNED_MARKER}\nNo. [rules](https://x.example/faq) @admin"
    assert sanitize(canned, EVIDENCE) == sanitize_module.SanitizeResult(canned, True, reasons=("canned",))
    assert sanitize(" " + canned, EVIDENCE).text == "No. rules `@admin`"
    assert sanitize(canned, EVIDENCE, allow_canned=False).text == "No. rules `@admin`"


@pytest.mark.parametrize(
    ("entity", "decoded"),
    [
        ("&amp;", "&"),
        ("&#64;", "@"),
        ("&#x5B;", "["),
        ("&nosuchentity;", "&nosuchentity;"),
        ("&#0;", "\ufffd"),
        ("&#xD800;", "\ufffd"),
        ("&#1114112;", "\ufffd"),
        ("&#13;", "\n"),
        ("&#x202E;", ""),
        ("&#xE000;", ""),
        ("&copy", "&copy"),
    ],
)
def test_decode_entities(entity: str, decoded: str) -> None:
    assert decode_entities(entity) == decoded


def test_citation_runs_merge_after_removals() -> None:
    assert sanitize("[[1]]<img src=x>[[1]]", EVIDENCE).text == "[1](/t/scene/12/3)"
    assert (
        sanitize("a [[1]] <b>x</b>, [[1]] b", EVIDENCE).text == "a [1](/t/scene/12/3) x, [1](/t/scene/12/3) b"
    )
    assert sanitize("see [[1]] , <i></i> [[1]].", EVIDENCE).text == "see [1](/t/scene/12/3)."


def test_topic_links_read_back_post_links() -> None:
    post = sanitize("[[1]]", EVIDENCE).text
    assert sanitize(post, EVIDENCE, links="topic").text == "[1](/t/scene/12)"


def test_code_span_rendering_round_trips() -> None:
    for content in ("a", "`", "a``b", " a ", "  ", "` x `"):
        rendered = render_code_span(content)
        assert sanitize(f"x {rendered} y", ()).text == f"x {rendered} y"


def test_fences() -> None:
    blocks = split_blocks("a\n   ~~~~ python extra\n   x = 1\n  y\n~~~~~\nb\n```\n```\n```x`y\nc")
    assert [(b.kind, b.text, b.info) for b in blocks] == [
        ("prose", "a", ""),
        ("fence", "x = 1\ny", "python"),
        ("prose", "b", ""),
        ("fence", "", ""),
        ("prose", "```x`y\nc", ""),
    ]
    assert render_fence(Block("fence", "a\n```\nb", "py")) == "````py\na\n```\nb\n````"
    assert render_fence(Block("fence", "", "")) == "```\n```"
    assert sanitize("```\nunclosed @admin", ()).text == "```\nunclosed @admin\n```"
    assert sanitize("```js<script>\nx\n```", ()).text == "```jsscript\nx\n```"


def test_script_and_style_elements_go_with_their_content() -> None:
    text = "a <script><script>evil()</script> b <STYLE>p{}</style> c <script>never closed"
    assert sanitize(text, ()).text == "a  b  c never closed"
