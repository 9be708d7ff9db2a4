"""``FakePostIndex``: the ``PostIndex`` protocol in memory, for tests that need no PostgreSQL.

It holds what ``post_index`` and ``categories`` hold and answers each query as the SQL of
``worker/retrieval/recall.py`` does, so the contract suite (``tests/contracts/test_post_index.py``) runs
the same assertions on it and on ``PostgresPostIndex``:

- eligibility is the ``citable_categories`` view (``worker/db/migrations/0011_categories.sql``): a
  post's category, its parent and its grandparent must be described by the forum as not
  read-restricted; a post without category, or in a category never described, is never eligible;
- ``recall`` is exact cosine order (pgvector's HNSW index with the iterative scan returns the exact order
  on the small sets tests use), ties by post id, excluded ids left out, ranks from 1;
- ``cosines`` reads every indexed post (``COSINES_SQL`` has no eligibility filter), ``is_empty`` too;
- ``posts``, ``citable_topics`` and ``neighbours`` read only eligible posts.

Vectors are kept in float64; PostgreSQL stores ``halfvec`` (float16), so its cosines differ in the
third decimal: compare with a tolerance.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from worker.domain import Candidate
from worker.errors import IndexMismatchError

PUBLIC_CATEGORY = 1


@dataclass(frozen=True, slots=True)
class _Category:
    read_restricted: bool | None
    parent_category_id: int | None


class FakePostIndex:
    """An in-memory post index: ``add_post`` and ``describe_category`` write, the protocol reads."""

    def __init__(self, *, model: str = "test-model", dimension: int = 8) -> None:
        self._model = model
        self._dimension = dimension
        self._posts: dict[int, tuple[Candidate, np.ndarray]] = {}
        self._categories: dict[int, _Category] = {}
        self._lock = threading.Lock()
        self.recalls: list[int] = []  # the k of each recall, for tests that count queries

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    # -- writing (what the backfill and the category sync do to the tables) ----------------------------

    def describe_category(
        self, category_id: int, *, restricted: bool | None = False, parent_category_id: int | None = None
    ) -> None:
        """Record what the forum says of a category (``backfill.categories``); ``restricted=None``: the name
        is known but not the permissions (not citable)."""
        with self._lock:
            self._categories[category_id] = _Category(restricted, parent_category_id)

    def add_post(
        self,
        post_id: int,
        vector: Sequence[float],
        *,
        topic_id: int | None = None,
        post_number: int = 1,
        category_id: int | None = PUBLIC_CATEGORY,
        title: str | None = None,
        text: str | None = None,
    ) -> None:
        """One indexed post, as the backfill writes it (title, blank line, body); its category is recorded
        as public unless it was already described (as ``tests/worker/retrieval/doubles.insert_post``)."""
        if len(vector) != self._dimension:
            raise ValueError(f"expected {self._dimension} dimensions, got {len(vector)}")
        topic = topic_id if topic_id is not None else post_id
        title = title if title is not None else f"Topic {topic}"
        body = text if text is not None else f"body of post {post_id}"
        candidate = Candidate(
            post_id=post_id,
            topic_id=topic,
            post_number=post_number,
            topic_slug=f"topic-{topic}",
            topic_title=title,
            text=f"{title}\n\n{body}",
            category_id=category_id,
        )
        with self._lock:
            if category_id is not None and category_id not in self._categories:
                self._categories[category_id] = _Category(False, None)
            self._posts[post_id] = (candidate, np.asarray(vector, dtype=np.float64))

    def remove_post(self, post_id: int) -> None:
        with self._lock:
            self._posts.pop(post_id, None)

    # -- the PostIndex protocol ----------------------------------------------------------------------

    def recall(
        self, vector: Sequence[float], k: int, exclude_post_ids: Sequence[int] = ()
    ) -> list[Candidate]:
        self._check(vector, "CITEBOT_EMBEDDINGS__DIMENSION")
        self.recalls.append(k)
        excluded = set(exclude_post_ids)
        with self._lock:
            citable = self._citable()
            scored = [
                (_cosine(vector, v), c)
                for c, v in self._posts.values()
                if c.category_id in citable and c.post_id not in excluded
            ]
        scored.sort(key=lambda sc: (-sc[0], sc[1].post_id))
        return [
            _with(c, cosine=cos, vector_rank=rank)
            for rank, (cos, c) in enumerate(scored[: max(k, 0)], start=1)
        ]

    def is_empty(self) -> bool:
        with self._lock:
            return not self._posts

    def cosines(self, vector: Sequence[float], post_ids: Sequence[int]) -> dict[int, float]:
        if not post_ids:
            return {}
        self._check(vector, "the index")
        with self._lock:
            return {pid: _cosine(vector, self._posts[pid][1]) for pid in set(post_ids) if pid in self._posts}

    def posts(self, post_ids: Sequence[int]) -> dict[int, Candidate]:
        with self._lock:
            citable = self._citable()
            return {
                pid: self._posts[pid][0]
                for pid in set(post_ids)
                if pid in self._posts and self._posts[pid][0].category_id in citable
            }

    def citable_topics(self, topic_ids: Sequence[int]) -> frozenset[int]:
        wanted = set(topic_ids)
        with self._lock:
            citable = self._citable()
            return frozenset(
                c.topic_id
                for c, _ in self._posts.values()
                if c.topic_id in wanted and c.category_id in citable
            )

    def citable_categories(self) -> frozenset[int]:
        with self._lock:
            return self._citable()

    def neighbours(self, topic_id: int, post_number: int, n: int) -> list[Candidate]:
        if n <= 0:
            return []
        with self._lock:
            citable = self._citable()
            found = [
                c
                for c, _ in self._posts.values()
                if c.topic_id == topic_id
                and abs(c.post_number - post_number) <= n
                and c.post_number != post_number
                and c.category_id in citable
            ]
        return sorted(found, key=lambda c: c.post_number)

    # -- helpers -------------------------------------------------------------------------------------

    def _check(self, vector: Sequence[float], what: str) -> None:
        if len(vector) != self._dimension:
            raise IndexMismatchError(
                f"query vector has {len(vector)} dimensions, {what} {self._dimension}", service="postgres"
            )

    def _citable(self) -> frozenset[int]:
        """The ``citable_categories`` view: the category and each ancestor (two levels) not restricted."""

        def public(category_id: int | None) -> bool:
            found = self._categories.get(category_id) if category_id is not None else None
            return found is not None and found.read_restricted is False

        out = set()
        for cid, cat in self._categories.items():
            if cat.read_restricted is not False:
                continue
            parent = cat.parent_category_id
            if parent is not None and not public(parent):
                continue
            grand = self._categories[parent].parent_category_id if parent is not None else None
            if grand is not None and not public(grand):
                continue
            out.add(cid)
        return frozenset(out)


def _cosine(a: Sequence[float], b: np.ndarray) -> float:
    va = np.asarray(a, dtype=np.float64)
    denom = float(np.linalg.norm(va) * np.linalg.norm(b))
    return float(va @ b) / denom if denom else 0.0


def _with(c: Candidate, *, cosine: float, vector_rank: int) -> Candidate:
    return replace(c, cosine=cosine, vector_rank=vector_rank)
