"""Where posts come from: one protocol, three sources (``db``, ``api``, ``file``).

A source yields ``SourceBatch``es walking post ids in one direction (``db`` and ``file`` ascending, ``api``
descending, as Discourse's ``/posts.json?before=`` pages). Each batch *covers* an id range: every post
the source has with an id in ``[lo, hi]`` is in that batch, so anything the index holds in that range
and the batch lacks has vanished from the forum (or from what the source may show) and is removed: the
range sweep. It removes only rows its owner wrote (``owner_of``): an export never deletes the live
forum's posts or another export's, unless the run is told to ``prune``. ``cursor`` is the batch's
resume token (``hi`` going up, ``lo`` going down); the last one committed is the checkpoint, and
``read(cursor)`` resumes strictly past it.

A source that can tell what changed since its last complete walk (``api``: Discourse lists posts newest
first) is ``Watermarked``: its walk stops at the watermark kept with its checkpoint, so a new walk reads
only the posts created since the last one (``docs/backfill.md``, "Incremental and bulk").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from backfill.categories import CategoryList

LIVE_FORUM = "forum"


def owner_of(source_key: str) -> str:
    """Who owns the rows a source writes: the live forum for ``db`` and ``api`` (and the webhook
    events), the source itself otherwise (an export folder, ``file:<path>``). A range sweep removes
    only rows of its own owner."""
    return LIVE_FORUM if source_key in ("db", "api") else source_key


@dataclass(frozen=True, slots=True)
class SourcePost:
    """One post with everything text preparation and eligibility need."""

    post_id: int
    topic_id: int
    post_number: int
    topic_slug: str
    topic_title: str
    category_id: int | None
    category_name: str | None
    tags: tuple[str, ...]
    cooked: str
    raw: str | None = None
    post_type: int = 1
    hidden: bool = False
    deleted: bool = False  # trashed or withdrawn by its author (worker.domain.ForumPost.deleted)
    archetype: str = "regular"
    topic_visible: bool = True
    topic_deleted: bool = False
    category_read_restricted: bool = False
    username: str | None = None
    updated_at: str | None = None
    reply_to_post_number: int | None = None
    reply_to_username: str | None = None
    # The solved plugin's flag: this post is its topic's accepted answer (``citebot calibrate``'s gold);
    # False when the source cannot tell.
    accepted_answer: bool = False
    # A first post's topic siblings, to tell an open question from an answered one (backfill.evidence);
    # None when the source cannot tell.
    replies: tuple[SourcePost, ...] | None = None


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """Posts whose ids lie in ``[lo, hi]``, and all the source has in that range, in walking order."""

    posts: tuple[SourcePost, ...]
    lo: int
    hi: int
    cursor: int


@runtime_checkable
class PostSource(Protocol):
    """A forum's posts, walked by id in one direction, in batches that cover id ranges."""

    @property
    def key(self) -> str:
        """Checkpoint key in ``backfill_state`` (``db``, ``api``, ``file:<path>``)."""
        ...

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        """Batches of posts past ``cursor`` (from the start when None)."""
        ...

    def estimate(self, cursor: int | None) -> int | None:
        """How many posts remain past ``cursor`` (for the ETA), or None when unknown."""
        ...

    def categories(self) -> CategoryList | None:
        """The categories the source can describe (``backfill.categories``: a partial list never widens
        what is public), or None when it describes none."""
        ...


@runtime_checkable
class Watermarked(Protocol):
    """A source whose walk ends at a watermark saved with the checkpoint (``backfill_state.cursor``).

    ``start`` gets what the last checkpoint saved (``{}`` the first time) before ``read``; ``walk`` is
    saved with each page's checkpoint (so an interrupted walk resumes with the same bounds); ``next_walk``
    is kept when the walk completes, and the next walk starts from it.
    """

    def start(self, saved: Mapping[str, object], *, full: bool) -> None:
        """Set this walk's bounds from ``saved``; ``full`` ignores the watermark (the whole forum)."""
        ...

    def walk(self) -> dict[str, int]:
        """This walk's bounds, saved with each page's checkpoint."""
        ...

    def next_walk(self) -> dict[str, int]:
        """What the next walk starts from, kept once this one completes."""
        ...
