"""The last check before posting: every source of a reply is still readable by any member.

Retrieval decides what is citable when the question is read; the reply is posted seconds later (the LLM
is the slow part). In between a category may be made private, a post hidden by flags, a topic unlisted
or moved. So, right before a reply is stored for posting, its sources are read again against the
forum's current state, and a source that is no longer visible is dropped; the pipeline then rebuilds the
reply from the sources left, or abstains when none is left (``worker.pipeline``).

What "current state" means depends on the link grain:

- **post grain** (the posts pipeline): the post index, which the webhook events keep in step with the
  forum (``backfill.incremental``): the post must still be indexed and eligible (its category public
  now). One SQL query, no API request.
- **topic grain** (the legacy path, whose sources may not be indexed): each source's topic is read as
  the reader (``DiscourseClient.reader()``: anonymous by default, never the bot's admin rights). A topic
  the reader cannot open (404/403, ``lib/guardian/topic_guardian.rb`` ``can_see_topic?``), a deleted
  one, a private message or an unlisted one (``visible: false``) is dropped. One anonymous request per
  source topic (at most ``retrieval.sources_k``); anonymous requests do not spend the admin-API bucket.

A failure to check is not a pass: a transient error propagates and the question is retried later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from worker.domain import ForumTopic, Source
from worker.errors import AuthError, NotFoundError
from worker.retrieval.recall import PostIndex

log = logging.getLogger(__name__)

Grain = Literal["post", "topic"]


class TopicReader(Protocol):
    """Reads a topic as the reader identity (``DiscourseClient.reader()``)."""

    def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic: ...


@dataclass(frozen=True, slots=True)
class Recheck:
    """The sources still visible, in their order, and why each other one was dropped."""

    kept: tuple[Source, ...]
    dropped: tuple[tuple[int, str], ...]  # (post id, reason)

    @property
    def changed(self) -> bool:
        return bool(self.dropped)


class SourceCheck:
    """Re-reads the sources of a reply (see the module docstring for what each grain asks)."""

    def __init__(self, index: PostIndex | None, reader: TopicReader | None) -> None:
        self.index = index
        self.reader = reader

    def recheck(self, sources: Sequence[Source], grain: Grain) -> Recheck:
        if not sources:
            return Recheck((), ())
        if grain == "post":
            return self._by_index(sources)
        return self._by_reader(sources)

    def _by_index(self, sources: Sequence[Source]) -> Recheck:
        if self.index is None:
            # Post-grain sources come from the index; without one nothing can vouch for them.
            return Recheck((), tuple((s.post_id, "no post index to check against") for s in sources))
        eligible = self.index.posts([s.post_id for s in sources])
        kept, dropped = [], []
        for source in sources:
            now = eligible.get(source.post_id)
            if now is None:
                dropped.append((source.post_id, "no longer citable (hidden, deleted or restricted)"))
            elif now.topic_id != source.topic_id:
                dropped.append((source.post_id, "moved to another topic"))
            else:
                kept.append(source)
        return Recheck(tuple(kept), tuple(dropped))

    def _by_reader(self, sources: Sequence[Source]) -> Recheck:
        if self.reader is None:
            return Recheck((), tuple((s.post_id, "no reader to check against") for s in sources))
        verdicts: dict[int, str | None] = {}
        kept, dropped = [], []
        for source in sources:
            if source.topic_id not in verdicts:
                verdicts[source.topic_id] = _topic_verdict(self.reader, source.topic_id)
            why = verdicts[source.topic_id]
            if why is None:
                kept.append(source)
            else:
                dropped.append((source.post_id, why))
        return Recheck(tuple(kept), tuple(dropped))


def _topic_verdict(reader: TopicReader, topic_id: int) -> str | None:
    """None when the reader may read the topic and it is listed; else why it may not be cited."""
    try:
        topic = reader.get_topic(topic_id)
    except NotFoundError:
        return "topic not found for the reader"
    except AuthError:
        return "topic not readable by the reader"
    if topic.deleted:
        return "topic deleted"
    if topic.archetype != "regular":
        return "private message"
    if not topic.visible:
        return "topic unlisted"
    return None


__all__ = ["Recheck", "SourceCheck", "TopicReader"]
