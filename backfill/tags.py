"""Public tags only: the index embeds a topic's tags as an anonymous reader sees them.

Discourse shows staff every tag of a topic, including those of tag groups whose permissions leave the
``everyone`` group out ("staff-only" tags, or tags of a group's own tag group). The indexer reads as
staff, so it filters: a tag is hidden when it belongs to at least one tag group and none of its groups
lets ``everyone`` see it (``DiscourseTagging.hidden_tag_names`` for an anonymous guardian,
lib/discourse_tagging.rb; ``TagGroupSerializer`` shows a group without permission rows as
``everyone: full``, app/serializers/tag_group_serializer.rb).

``GET /tag_groups.json`` (staff) lists the groups; the worker reads it at most every
``HiddenTags.ttl_s`` seconds (no webhook reports a tag group change), the backfill once per run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from backfill.sources import SourcePost
from worker.domain import TagGroup
from worker.errors import PermanentError

log = logging.getLogger(__name__)

# How long the worker trusts the tag groups it read: a tag group made staff-only is honoured this late.
HIDDEN_TAGS_TTL_S = 300.0


def parse_tag_groups(data: Mapping[str, Any]) -> tuple[TagGroup, ...]:
    """``GET /tag_groups.json`` → tag groups (``TagGroup.all_from_json``, the one reading)."""
    return TagGroup.all_from_json(data)


def hidden_tag_names(groups: Iterable[TagGroup]) -> frozenset[str]:
    """Tags in some tag group, none of whose groups ``everyone`` may see."""
    grouped: set[str] = set()
    public: set[str] = set()
    for group in groups:
        grouped.update(group.tags)
        if group.everyone:
            public.update(group.tags)
    return frozenset(grouped - public)


def public_tags(post: SourcePost, hidden: frozenset[str]) -> SourcePost:
    """``post`` without the tags an anonymous reader does not see."""
    if not hidden or not any(t in hidden for t in post.tags):
        return post
    return dataclasses.replace(post, tags=tuple(t for t in post.tags if t not in hidden))


class HiddenTags:
    """The hidden tag names, read through ``load`` at most every ``ttl_s`` seconds (thread-safe).

    A read that fails for a while (timeout, 5xx, 429) raises, and the refresh that needed it is retried:
    the index never embeds a tag it could not check. A refusal (403: the API user is not staff, so
    Discourse already shows it only the tags its groups may see; 404: no tag groups) counts as no hidden
    tag, logged once per ``ttl_s``. The first read happens on first use."""

    def __init__(
        self,
        load: Callable[[], Iterable[TagGroup]],
        *,
        ttl_s: float = HIDDEN_TAGS_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.ttl_s = ttl_s
        self._clock = clock
        self._value: frozenset[str] | None = None
        self._at = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> frozenset[str]:
        with self._lock:
            now = self._clock()
            if self._value is None or now - self._at >= self.ttl_s:
                try:
                    self._value = hidden_tag_names(self._load())
                except PermanentError as exc:
                    log.warning(
                        "cannot read the tag groups (%s): tags are kept as the API user sees them", exc
                    )
                    self._value = frozenset()
                self._at = now
            return self._value
