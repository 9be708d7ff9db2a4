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
(``backfill.tags``). Requests are paced to ``requests_per_minute`` and a 429 is retried after its
``Retry-After`` (or ``extras.wait_seconds``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from backfill.categories import CategoryList
from backfill.evidence import REPLY_WINDOW
from backfill.sources import SourceBatch, SourcePost
from backfill.sources.discourse_json import source_post, stream_replies
from backfill.tags import hidden_tag_names, parse_tag_groups, public_tags
from worker.budget import ApiBudget
from worker.clients import http as outbound
from worker.domain import ForumCategory
from worker.errors import AuthError, NotFoundError, RateLimitedError, ServiceUnavailableError, TransientError
from worker.retry import RetryPolicy, call_with_retry
from worker.settings import DiscourseSettings

log = logging.getLogger(__name__)
SERVICE = "discourse"


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
        self.http = http
        self.settings = settings
        # The site-wide budget at the lowest priority: answers and index refresh go first.
        self.budget = budget if budget is not None else ApiBudget(settings, sleep=sleep)
        self.retry = RetryPolicy(attempts=max_retries + 1)  # worker.retry: 1 s doubling, capped at 60 s
        self.sleep = sleep
        self._topics: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._categories: dict[int, ForumCategory] | None = None
        self._looked_up: set[int] = set()
        self._hidden_tags: frozenset[str] | None = None
        self._first: list[dict[str, Any]] | None = None  # the newest page, read for the estimate
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
        return max(0, max((int(p["id"]) for p in self._first), default=0) - self.since)

    def read(self, cursor: int | None, *, batch_size: int) -> Iterator[SourceBatch]:
        # batch_size is Discourse's page (50 posts); the pipeline's page is what Discourse returns.
        floor = self.since + 1
        hi: int | None = cursor - 1 if cursor is not None else None
        while hi is None or hi >= floor:
            items = [p for p in self._latest(hi) if hi is None or int(p["id"]) <= hi]
            newer = [p for p in items if int(p["id"]) >= floor]
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

    def _latest(self, hi: int | None) -> list[dict[str, Any]]:
        """One page of ``GET /posts.json`` below ``hi + 1`` (the newest without ``hi``)."""
        if hi is None and self._first is not None:
            first, self._first = self._first, None
            return first
        params = {"before": hi + 1} if hi is not None else None
        items = self._get("/posts.json", params).get("latest_posts") or []
        return [p for p in items if isinstance(p, dict) and "id" in p]

    # -- internals ---------------------------------------------------------------------------------

    def _post(self, p: dict[str, Any]) -> SourcePost:
        topic = self._topic(int(p["topic_id"]))
        category_id = p.get("category_id", topic.get("category_id"))
        category = self._category(int(category_id)) if category_id else None
        first = int(p["post_number"]) == 1
        post = source_post(
            p,
            topic,
            category_id=category_id,
            category_name=category.name if category else None,
            # A category Discourse will not describe (404) is treated as restricted: fail closed.
            restricted=category.read_restricted if category else category_id is not None,
            raw=p.get("raw"),
            replies=stream_replies(topic, int(p["id"])) if first else None,
        )
        return public_tags(post, self._tags_hidden())

    def _category(self, category_id: int) -> ForumCategory | None:
        """The category as ``/site.json`` lists it, else as ``/c/{id}/show.json`` shows it (asked once
        per run); None when the forum does not have it."""
        known = self._site_categories()
        if category_id not in known and category_id not in self._looked_up:
            self._looked_up.add(category_id)
            try:
                data = self._get(f"/c/{category_id}/show.json").get("category")
            except NotFoundError:
                data = None
            if isinstance(data, dict) and "id" in data:
                known[category_id] = ForumCategory.from_json(data)
        return known.get(category_id)

    def _tags_hidden(self) -> frozenset[str]:
        """Tags an anonymous reader may not see (``GET /tag_groups.json``, read once per run). An API
        user that may not read tag groups (not staff) is itself shown only the tags it may see."""
        if self._hidden_tags is None:
            try:
                self._hidden_tags = hidden_tag_names(parse_tag_groups(self._get("/tag_groups.json")))
            except (AuthError, NotFoundError):
                log.warning("cannot read /tag_groups.json: tags are kept as the API user sees them")
                self._hidden_tags = frozenset()
        return self._hidden_tags

    def _topic(self, topic_id: int) -> dict[str, Any]:
        topic = self._topics.get(topic_id)
        if topic is None:
            data = self._get(f"/t/{topic_id}.json")
            topic = {
                k: data.get(k)
                for k in ("id", "title", "slug", "category_id", "archetype", "visible", "deleted_at", "tags")
            }
            # The first page of the stream: whether the first post is an open question (backfill.evidence).
            stream = data.get("post_stream")
            if isinstance(stream, dict) and isinstance(stream.get("posts"), list):
                topic["post_stream"] = {"posts": stream["posts"][:REPLY_WINDOW]}
            self._topics[topic_id] = topic
            if len(self._topics) > 1024:
                self._topics.popitem(last=False)
        return topic

    def _site_categories(self) -> dict[int, ForumCategory]:
        if self._categories is None:
            cats = self._get("/site.json").get("categories") or []
            self._categories = {int(c["id"]): ForumCategory.from_json(c) for c in cats if "id" in c}
        return self._categories

    def _get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One GET within the site-wide API budget (``bulk``), with 429 and 5xx retried (a 429 pauses
        the budget for every process for the server's wait)."""

        def get() -> dict[str, Any]:
            self.budget.acquire("bulk")
            self.requests += 1
            return self._request(path, params)

        def waited(exc: TransientError, retry: int, wait: float) -> float:
            if isinstance(exc, RateLimitedError):  # every process waits: the budget's shared pause
                pause = exc.retry_after if exc.retry_after is not None else 60.0
                self.budget.pause(pause)
                log.warning("%s; the API budget waits %.1f s", exc, pause)
                return 0.0
            log.warning("%s; retry %d in %.1f s", exc, retry, wait)
            return wait

        return call_with_retry(get, self.retry, sleep=self.sleep, on_retry=waited)

    def _request(self, path: str, params: dict[str, Any] | None) -> dict[str, Any]:
        headers = {
            "Api-Key": self.settings.api_key.get_secret_value(),
            "Api-Username": self.settings.api_username,
            "Accept": "application/json",
        }
        what = f"GET {path}"
        response = outbound.send(
            self.http,
            SERVICE,
            "GET",
            self.settings.base_url + path,
            what=what,
            params=params,
            headers=headers,
            timeout=self.settings.timeout_s,
        )
        outbound.check(SERVICE, response, what=what)
        data = outbound.json_body(SERVICE, response, what=what)
        if not isinstance(data, dict):
            raise ServiceUnavailableError(f"GET {path}: unexpected JSON", service=SERVICE)
        return data


def _int(value: object) -> int:
    """A saved cursor value as an int (0 when absent or unreadable)."""
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0
