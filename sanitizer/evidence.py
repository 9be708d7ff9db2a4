"""The evidence a reply may cite, and the only link targets the sanitizer ever writes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

LinkGrain = Literal["post", "topic"]

_SLUG_JUNK = re.compile(r"[^a-z0-9]+")
_BASE_URL = re.compile(
    r"https?://[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::\d{1,5})?(?:/[A-Za-z0-9._~-]+)*/?"
)
_MAX_SLUG = 80


@runtime_checkable
class SupportsEvidence(Protocol):
    """Anything that can describe itself as an evidence dict (``worker.domain.Source`` does)."""

    def as_evidence(self) -> Mapping[str, object]: ...


class EvidenceError(ValueError):
    """The evidence (or a link option) is malformed; nothing can be linked safely."""


@dataclass(frozen=True, slots=True)
class EvidenceSource:
    """Source ``[[n]]``: a post of the forum. ``slug`` may be anything; links use its safe form."""

    n: int
    topic_id: int
    post_number: int
    slug: str
    title: str = ""

    def __post_init__(self) -> None:
        for name in ("n", "topic_id", "post_number"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise EvidenceError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.slug, str) or not isinstance(self.title, str):
            raise EvidenceError("slug and title must be strings")

    def link(self, grain: LinkGrain, base_url: str = "") -> str:
        """``<base>/t/<slug>/<topic_id>/<post_number>`` (post) or ``<base>/t/<slug>/<topic_id>`` (topic)."""
        path = f"/t/{normalize_slug(self.slug)}/{self.topic_id}"
        if grain == "post":
            path = f"{path}/{self.post_number}"
        return f"{base_url}{path}"


def normalize_slug(slug: str) -> str:
    """Lowercase ASCII letters, digits and single hyphens; ``topic`` when nothing is left.

    A hostile slug (``x)(http://evil``, ``../..``, RTL tricks) cannot escape the link destination.
    """
    ascii_slug = unicodedata.normalize("NFKD", slug).encode("ascii", "ignore").decode("ascii")
    cleaned = _SLUG_JUNK.sub("-", ascii_slug.lower()).strip("-")[:_MAX_SLUG].strip("-")
    return cleaned or "topic"


def normalize_base_url(base_url: str | None) -> str:
    """``""`` (relative links) or an ``http(s)`` origin with an optional plain path, no trailing ``/``."""
    if base_url is None or base_url == "":
        return ""
    if not isinstance(base_url, str) or not _BASE_URL.fullmatch(base_url):
        raise EvidenceError(f"base URL must look like https://forum.example.com, got {base_url!r}")
    return base_url.rstrip("/")


def from_dicts(items: Iterable[Mapping[str, object]]) -> tuple[EvidenceSource, ...]:
    """Evidence from ``{"n", "topic_id", "post_number", "slug", "title"}`` objects (extra keys ignored).

    Raises EvidenceError naming the first bad item; numbers must be unique.
    """
    if isinstance(items, (str, bytes, Mapping)):
        raise EvidenceError("evidence must be a list of objects")
    sources: list[EvidenceSource] = []
    seen: set[int] = set()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise EvidenceError(f"item {index}: expected an object, got {type(item).__name__}")
        missing = [key for key in ("n", "topic_id", "post_number", "slug") if key not in item]
        if missing:
            raise EvidenceError(f"item {index}: missing {', '.join(missing)}")
        try:
            source = EvidenceSource(
                n=item["n"],  # type: ignore[arg-type]  # validated in __post_init__
                topic_id=item["topic_id"],  # type: ignore[arg-type]
                post_number=item["post_number"],  # type: ignore[arg-type]
                slug=item["slug"],  # type: ignore[arg-type]
                title=item.get("title", ""),  # type: ignore[arg-type]
            )
        except EvidenceError as exc:
            raise EvidenceError(f"item {index}: {exc}") from None
        if source.n in seen:
            raise EvidenceError(f"item {index}: source number {source.n} appears twice")
        seen.add(source.n)
        sources.append(source)
    return tuple(sources)
