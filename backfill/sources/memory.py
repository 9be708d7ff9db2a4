"""Posts held in memory (tests, the benchmark's synthetic forum, one-off scripts)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from backfill.categories import CategoryList
from backfill.sources import SourceBatch, SourcePost
from worker.domain import ForumCategory


class MemorySource:
    """A fixed list of posts, walked in ascending id order like the ``db`` and ``file`` sources.

    It describes the categories its posts carry (name, and restricted when a post says so or
    ``restricted`` lists it), as a partial list; ``restricted=None`` and no post category: none."""

    def __init__(
        self, posts: Iterable[SourcePost], *, key: str = "memory", restricted: frozenset[int] | None = None
    ) -> None:
        self.posts = sorted(posts, key=lambda p: p.post_id)
        self._ids = [p.post_id for p in self.posts]
        self._key = key
        self.restricted = restricted

    @property
    def key(self) -> str:
        return self._key

    def categories(self) -> CategoryList | None:
        found: dict[int, ForumCategory] = {}
        for p in self.posts:
            if p.category_id is None:
                continue
            old = found.get(p.category_id)
            restricted = p.category_read_restricted or (old is not None and old.read_restricted)
            name = p.category_name or (old.name if old else None)
            found[p.category_id] = ForumCategory(p.category_id, name, restricted)
        for cid in self.restricted or ():
            found[cid] = ForumCategory(cid, found[cid].name if cid in found else None, True)
        return CategoryList(tuple(found.values())) if found else None

    def estimate(self, cursor: int | None) -> int | None:
        return len(self._ids) - (bisect.bisect_right(self._ids, cursor) if cursor is not None else 0)

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        start = bisect.bisect_right(self._ids, cursor) if cursor is not None else 0
        lo = cursor + 1 if cursor is not None else 0
        for i in range(start, len(self.posts), batch_size):
            chunk = tuple(self.posts[i : i + batch_size])
            hi = chunk[-1].post_id
            yield SourceBatch(chunk, lo, hi, hi)
            lo = hi + 1
