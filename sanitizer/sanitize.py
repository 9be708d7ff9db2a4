"""``sanitize()``: the LLM's text in, the Markdown to post out (docs/sanitizer.md).

Pipeline for each prose block (fenced code blocks are kept verbatim, re-fenced canonically)::

    code spans → slots        (their content is shown literally by Discourse)
    backslash escapes → placeholders
    [[n]] runs → slots        (links built from the evidence alone)
    autolinks, reference definitions, Markdown links and images, BBCode → their words or nothing
    HTML → bleach, no tag allowed → character references decoded
    link-like words (URLs, domains, e-mails, @mentions, #hashtags) → code spans
    everything written back with every structural character that could start a link escaped

The function never raises. It fails closed: on any error, on a text too long, on options it cannot
honour, or when its own output would not come back unchanged through it (the idempotence self-check),
it returns ``ok=False`` with empty text, and the caller must post nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sanitizer.blocks import render_fence, split_blocks
from sanitizer.citations import CitationResolver
from sanitizer.codespans import extract_code_spans
from sanitizer.detect import find_wraps
from sanitizer.emit import Slot, emit_prose
from sanitizer.evidence import (
    EvidenceError,
    EvidenceSource,
    LinkGrain,
    SupportsEvidence,
    from_dicts,
    normalize_base_url,
)
from sanitizer.neutralize import (
    decode_entities,
    remove_urls,
    strip_autolinks,
    strip_bbcode,
    strip_definitions,
    strip_html,
    strip_links,
)
from sanitizer.text import MAX_INPUT_CHARS, SLOT_BASE, clean_text, protect_escapes, unescape_char

log = logging.getLogger(__name__)

CANNED_MARKER = "<!-- citebot:canned -->"
"""A text starting with exactly this is a canned (gate) reply and passes through untouched.

Same value as ``gate.CANNED_MARKER`` (the sanitizer imports nothing of ours; a test checks they match).
"""

Evidence = EvidenceSource | Mapping[str, object] | SupportsEvidence
"""One source: our dataclass, a dict of its fields, or an object with ``as_evidence()``."""

_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


@dataclass(frozen=True, slots=True)
class SanitizeResult:
    """``text`` to post when ``ok``; ``cited``/``dropped`` source numbers; ``reasons``: what was done."""

    text: str
    ok: bool
    cited: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()


def sanitize(
    text: str,
    evidence: Iterable[Evidence],
    *,
    links: LinkGrain = "post",
    base_url: str | None = None,
    allow_canned: bool = True,
) -> SanitizeResult:
    """Turn the LLM's ``text`` into Markdown whose only links are citations of ``evidence``.

    ``links`` picks post links (``/t/slug/topic/post``) or the legacy topic links (``/t/slug/topic``);
    ``base_url`` makes them absolute. With ``allow_canned`` (the default) a text that starts with
    ``CANNED_MARKER`` is returned untouched; pass ``allow_canned=False`` for text an LLM wrote, so that
    a model cannot forge the marker to skip sanitising.
    """
    try:
        return _sanitize(text, evidence, links=links, base_url=base_url, allow_canned=allow_canned)
    except Exception:  # fail closed: whatever went wrong, nothing is posted
        log.warning("sanitizer failed closed on an unexpected error")
        log.debug("sanitizer error", exc_info=True)
        return _refuse("error")


def _sanitize(
    text: str,
    evidence: Iterable[Evidence],
    *,
    links: LinkGrain,
    base_url: str | None,
    allow_canned: bool,
) -> SanitizeResult:
    if not isinstance(text, str):
        return _refuse("invalid-input")
    if allow_canned and text.startswith(CANNED_MARKER):
        return SanitizeResult(text=text, ok=True, reasons=("canned",))
    if len(text) > MAX_INPUT_CHARS:
        return _refuse("too-long")
    if links not in ("post", "topic"):
        return _refuse("invalid-links")
    try:
        base = normalize_base_url(base_url)
    except EvidenceError:
        return _refuse("invalid-base-url")
    try:
        sources = _coerce(evidence)
    except EvidenceError as exc:
        log.debug("invalid evidence: %s", exc)
        return _refuse("invalid-evidence")
    resolver = CitationResolver(sources, links, base)
    reasons: set[str] = set()
    out = _transform(text, resolver, reasons)
    if len(out) > MAX_INPUT_CHARS:
        return _refuse("too-long")  # escaping can lengthen a text; the output must be a valid input
    if _transform(out, CitationResolver(sources, links, base), set()) != out:
        log.warning("sanitizer output is not a fixed point; refusing to post it")
        return _refuse("not-idempotent")
    if not out.strip():
        return _refuse("empty")
    if resolver.log.forged:
        reasons.add("citation-forged")
    if resolver.log.dropped:
        reasons.add("citation-dropped")
    return SanitizeResult(
        text=out,
        ok=True,
        cited=tuple(resolver.log.cited),
        dropped=tuple(resolver.log.dropped),
        reasons=tuple(sorted(reasons)),
    )


def _transform(text: str, resolver: CitationResolver, reasons: set[str]) -> str:
    cleaned, changed = clean_text(text)
    if changed:
        reasons.add("invisible-characters")
    slots: dict[str, Slot] = {}
    parts: list[str] = []
    for block in split_blocks(cleaned):
        if block.kind == "fence":
            parts.append(render_fence(block))
            continue
        prose = _LEADING_BLANK_LINES.sub("", _prose(block.text, resolver, slots, reasons)).rstrip()
        if prose:
            parts.append(prose)
    return "\n\n".join(parts)


def _prose(text: str, resolver: CitationResolver, slots: dict[str, Slot], reasons: set[str]) -> str:
    def slot(value: str, *, code: bool) -> str:
        key = chr(SLOT_BASE + len(slots))
        slots[key] = Slot(value, code=code)
        return key

    source = "\n".join(extract_code_spans(line, lambda c: slot(c, code=True)) for line in text.split("\n"))
    source = protect_escapes(source)
    source = resolver.mark(source)
    source = strip_autolinks(source, reasons)
    source = strip_definitions(source, reasons)
    source = strip_links(source, reasons)
    source = strip_bbcode(source, reasons)
    if "<" in source:
        source = strip_html(source, reasons)
    raw = resolver.render(
        remove_urls(decode_entities(source), reasons), lambda links: slot(links, code=False)
    )
    display = "".join(unescape_char(ch) for ch in raw)
    wraps = find_wraps(display)
    reasons.update(kind for _, _, kind in wraps)
    return emit_prose(raw, display, wraps, slots)


def _coerce(evidence: Iterable[Evidence]) -> tuple[EvidenceSource, ...]:
    if isinstance(evidence, (str, bytes, Mapping)) or not isinstance(evidence, Iterable):
        raise EvidenceError("evidence must be a list")
    sources: list[EvidenceSource] = []
    for item in evidence:
        if isinstance(item, EvidenceSource):
            sources.append(item)
        elif isinstance(item, SupportsEvidence):
            sources.append(from_dicts([item.as_evidence()])[0])
        else:
            sources.append(from_dicts([item])[0])
    numbers = [source.n for source in sources]
    if len(set(numbers)) != len(numbers):
        raise EvidenceError("source numbers must be unique")
    return tuple(sources)


def _refuse(reason: str) -> SanitizeResult:
    return SanitizeResult(text="", ok=False, reasons=(reason,))
