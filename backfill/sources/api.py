"""Posts from the Discourse REST API, for hosted forums without a database replica.

``GET /posts.json?before=N`` lists the latest posts with ids below N, newest first, 50 a page
(``PostsController#latest`` → ``LatestPostsQuery#public_posts``: ``Post.public_posts.visible``, regular
post type, in ``Category.secured(guardian)``, ``ORDER BY id DESC``, ``PAGE_SIZE = 50``). So this source
walks ids DOWNWARD: each page covers ``[lowest id on the page, previous lowest - 1]`` and its cursor is
that lowest id. Discourse leaves out of that list what is deleted, hidden, a whisper or a small action,
in a private message or an unlisted topic, and the range sweep removes such posts from the index. The
API user is an admin, so the list also holds posts of read-restricted categories: those are recorded as
restricted (``/site.json``) and never indexed (``backfill.evidence``).

The walk is incremental (``Watermarked``): it stops at the highest post id of the last complete walk
(``since``), so an hourly run reads the posts created since (one page per 50 new posts, plus one topic
read per touched topic) and nothing else. The list is ordered by id, not by ``updated_at``: an edited
old post never comes back in it (nor does an edit bump ``/latest.json``, except of a topic's last post:
``PostRevisor#bump_topic``). Edits, deletions, hidden posts, moves and topic or category changes come
through the webhook events (``backfill.incremental``); ``--full`` walks the whole forum again, in place,
for what a missed event left behind.

Tags, the topic's archetype and visibility come from ``GET /t/{id}.json`` (cached per topic); category
names and ``read_restricted`` from ``GET /site.json``, and a category it lacks (lazy-loaded categories list
only the caller's sidebar) from ``GET /c/{id}/show.json``, once. That list is partial: it never widens
what is public (``backfill.categories``). Tags are kept only when an anonymous reader sees them: the API
user (staff) also sees the tags of restricted tag groups, so ``GET /tag_groups.json`` says which those are
(``backfill.tags``). Every request goes through the bot's REST client (``DiscourseClient`` at the
``bulk`` priority of the site-wide API budget: answers and index refresh go first); a 429 pauses that
budget in the client, for every process, and the request is retried once the pause is over; a 5xx or a
timeout is retried with ``worker.retry``'s backoff.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

import httpx

from backfill.categories import CategoryList
from backfill.sources import SourceBatch, SourcePost
from backfill.sources.discourse_json import to_source_post
from backfill.tags import hidden_tag_names, public_tags
from worker.budget import ApiBudget
from worker.clients.discourse import DiscourseClient
from worker.domain import ForumCategory, ForumPost, ForumTopic
from worker.errors import AuthError, NotFoundError, RateLimitedError, TransientError
from worker.retry import RetryPolicy, call_with_retry
from worker.settings import DiscourseSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


class ApiSource:
    """Discourse over HTTP, through an injected ``httpx.Client``."""

    def __init__(
        self,
        http: httpx.Client,
        settings: DiscourseSettings,
        *,
        budget: ApiBudget | None = None,
        max_retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        # The site-wide budget at the lowest priority: answers and index refresh go first.
        self.budget = budget if budget is not None else ApiBudget(settings, sleep=sleep)
        self.client = DiscourseClient(http, settings, budget=self.budget, priority="bulk")
        self.retry = RetryPolicy(attempts=max_retries + 1)  # worker.retry: 1 s doubling, capped at 60 s
        self.sleep = sleep
        self._topics: OrderedDict[int, ForumTopic] = OrderedDict()
        self._categories: dict[int, ForumCategory] | None = None
        self._looked_up: set[int] = set()
        self._hidden_tags: frozenset[str] | None = None
        self._first: list[ForumPost] | None = None  # the newest page, read for the estimate
        # The walk's bounds (``start``): ids above ``since``; ``top`` is the newest post it listed.
        self.since = 0
        self.top: int | None = None
        self.requests = 0  # requests sent (retries included): what a run reports

    @property
    def key(self) -> str:
        return "api"

    def categories(self) -> CategoryList | None:
        """What ``/site.json`` lists, and what the look-ups of this run found: a partial list."""
        return CategoryList(tuple(self._site_categories().values()), complete=False)

    # -- the watermark (backfill.sources.Watermarked) ---------------------------------------------------

    def start(self, saved: Mapping[str, object], *, full: bool) -> None:
        """This walk reads ids above ``since`` (0: the whole forum) and, resumed, below the saved top."""
        self.since = 0 if full else _int(saved.get("since"))
        self.top = _int(saved.get("top")) or None

    def walk(self) -> dict[str, int]:
        return {"since": self.since, "top": self.top or self.since}

    def next_walk(self) -> dict[str, int]:
        """The next walk reads what is newer than the newest post this one listed."""
        return {"since": max(self.since, self.top or 0)}

    # -- reading -----------------------------------------------------------------------------------

    def estimate(self, cursor: int | None) -> int | None:
        """Approximate: post ids left between the watermark and the cursor (ids are dense on most
        forums). Without a cursor the first page is read here and kept for ``read``."""
        if cursor is not None:
            return max(0, cursor - 1 - self.since)
        self._first = self._latest(None)
        return max(0, max((p.id for p in self._first), default=0) - self.since)

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        # batch_size is Discourse's page (50 posts); the pipeline's page is what Discourse returns.
        floor = self.since + 1
        hi: int | None = cursor - 1 if cursor is not None else None
        while hi is None or hi >= floor:
            items = [p for p in self._latest(hi) if hi is None or p.id <= hi]
            newer = [p for p in items if p.id >= floor]
            if not newer:
                if hi is not None:  # nothing left above the watermark: the rest of the range is empty
                    yield SourceBatch((), floor, hi, floor)
                return
            # In walking order (newest first), so a page cut by --limit keeps its upper part.
            posts = tuple(sorted((self._post(p) for p in newer), key=lambda p: -p.post_id))
            top = hi if hi is not None else posts[0].post_id
            if self.top is None:
                self.top = top
            # A page that reaches the watermark covers the range down to it: the walk ends there.
            reached = len(newer) < len(items)
            lo = floor if reached else posts[-1].post_id
            yield SourceBatch(posts, lo, top, lo)
            if reached:
                return
            hi = posts[-1].post_id - 1

    def _latest(self, hi: int | None) -> list[ForumPost]:
        """One page of ``GET /posts.json`` below ``hi + 1`` (the newest without ``hi``)."""
        if hi is None and self._first is not None:
            first, self._first = self._first, None
            return first
        return self._call(lambda: self.client.get_latest_posts(before=hi + 1 if hi is not None else None))

    # -- internals ---------------------------------------------------------------------------------

    def _post(self, p: ForumPost) -> SourcePost:
        topic = self._topic(p.topic_id)
        category_id = p.category_id if p.category_id is not None else topic.category_id
        category = self._category(category_id) if category_id else None
        post = to_source_post(
            p,
            topic,
            category.name if category else None,
            category_id=category_id,
            # A category Discourse will not describe (404) is treated as restricted: fail closed.
            restricted=category.read_restricted if category else category_id is not None,
        )
        return public_tags(post, self._tags_hidden())

    def _category(self, category_id: int) -> ForumCategory | None:
        """The category as ``/site.json`` lists it, else as ``/c/{id}/show.json`` shows it (asked once
        per run); None when the forum does not have it."""
        known = self._site_categories()
        if category_id not in known and category_id not in self._looked_up:
            self._looked_up.add(category_id)
            with contextlib.suppress(NotFoundError):  # the forum has no such category
                known[category_id] = self._call(lambda: self.client.get_category(category_id))
        return known.get(category_id)

    def _tags_hidden(self) -> frozenset[str]:
        """Tags an anonymous reader may not see (``GET /tag_groups.json``, read once per run). An API
        user that may not read tag groups (not staff) is itself shown only the tags it may see."""
        if self._hidden_tags is None:
            try:
                self._hidden_tags = hidden_tag_names(self._call(self.client.get_tag_groups))
            except (AuthError, NotFoundError):
                log.warning("cannot read /tag_groups.json: tags are kept as the API user sees them")
                self._hidden_tags = frozenset()
        return self._hidden_tags

    def _topic(self, topic_id: int) -> ForumTopic:
        """``GET /t/{id}.json`` once per topic (the last 1,024 kept): its fields, tags, and the first
        page of its stream (whether its first post is an open question: ``backfill.evidence``)."""
        topic = self._topics.get(topic_id)
        if topic is None:
            topic = self._call(lambda: self.client.get_topic(topic_id))
            self._topics[topic_id] = topic
            if len(self._topics) > 1024:
                self._topics.popitem(last=False)
        return topic

    def _site_categories(self) -> dict[int, ForumCategory]:
        if self._categories is None:
            self._categories = {c.id: c for c in self._call(self.client.get_site_categories)}
        return self._categories

    def _call(self, read: Callable[[], T]) -> T:
        """One read of the client, with 429 and 5xx retried. The client takes a token of the site-wide
        budget for each request and, on a 429, pauses the budget for every process for the server's
        wait; the retry then waits for that pause in the budget, not here."""

        def counted() -> T:
            self.requests += 1  # retries included
            return read()

        def waited(exc: TransientError, retry: int, wait: float) -> float:
            if isinstance(exc, RateLimitedError):
                log.warning("%s; retry %d once the API budget's pause is over", exc, retry)
                return 0.0
            log.warning("%s; retry %d in %.1f s", exc, retry, wait)
            return wait

        return call_with_retry(counted, self.retry, sleep=self.sleep, on_retry=waited)


def _int(value: object) -> int:
    """A saved cursor value as an int (0 when absent or unreadable)."""
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0
