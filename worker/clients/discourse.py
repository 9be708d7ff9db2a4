"""``DiscourseClient``: the subset of Discourse's REST API the bot uses, over an injected httpx client.

The injected client carries the timeout (``settings.discourse.timeout_s`` at the composition root).

Every call goes through ``_request``, which adds the ``Api-Key``/``Api-Username`` headers (none for the
anonymous reader, ``reader()``: searches never run with the bot's rights) and sends it
through ``worker.clients.http`` (the one outbound call path and its status table): 429 →
``RateLimitedError`` (wait from ``Retry-After`` or ``extras.wait_seconds``), 408/5xx/timeouts →
``ServiceUnavailableError``, 400/413/422 → ``ValidationError`` with Discourse's ``errors``, 401/403 →
``AuthError``, 404 → ``NotFoundError``, any other 4xx → ``PermanentError``. Every call takes a token of
the site-wide API budget first (``worker.budget``): Discourse allows ~60 admin-key requests a minute
for the whole site, whatever the route. A client speaks at one priority; ``at(priority)`` gives a view
of it at another (same HTTP client, same budget). A 429 pauses the budget for its ``Retry-After`` in
every process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

import httpx

from worker.budget import ApiBudget, Priority
from worker.clients import http as outbound
from worker.domain import (
    ForumCategory,
    ForumPost,
    ForumTopic,
    Member,
    Notification,
    PendingPost,
    SearchHit,
    TagGroup,
    optional_int,
)
from worker.errors import CitebotError, PermanentError, RateLimitedError
from worker.settings import DiscourseSettings

log = logging.getLogger(__name__)

SERVICE = "discourse"
# The companion plugin's name (`# name:` in deploy/discourse-plugin/plugin.rb): the flags are read with
# `?plugin=citebot`, the only narrowing Admin::SiteSettingsController#index accepts besides `categories`.
SETTINGS_PLUGIN = "citebot"
# Discourse serves a topic's post stream in chunks of 20 and accepts that many ids per request.
POST_IDS_PER_REQUEST = 20
NOTIFICATION_KINDS: Mapping[int, Literal["mentioned", "replied", "private_message"]] = {
    1: "mentioned",
    2: "replied",
    6: "private_message",
}

Json = dict[str, Any]


class DiscourseClient:
    """One method per remote call; returns ``worker.domain`` values, raises ``worker.errors``."""

    def __init__(
        self,
        http: httpx.Client,
        settings: DiscourseSettings,
        *,
        budget: ApiBudget | None = None,
        priority: Priority = "answer",
        reader: bool = False,
    ) -> None:
        self._http = http
        self._settings = settings
        self._base = settings.base_url
        self._budget = budget if budget is not None else ApiBudget(settings)
        self._priority: Priority = priority
        self._reader = reader

    @property
    def priority(self) -> Priority:
        return self._priority

    @property
    def identity(self) -> str:
        """Who the requests act as: the bot's API user, a reader member, or ``anonymous``."""
        if not self._reader:
            return self._settings.api_username
        return self._settings.reader_username.strip() or "anonymous"

    @property
    def anonymous(self) -> bool:
        return self._reader and not self._settings.reader_username.strip()

    def at(self, priority: Priority) -> DiscourseClient:
        """This client at another priority of the shared budget."""
        return DiscourseClient(
            self._http, self._settings, budget=self._budget, priority=priority, reader=self._reader
        )

    def reader(self) -> DiscourseClient:
        """This client as the reader: what any member may read, never the bot's own rights.

        Discourse answers a request as the user its ``Api-Key`` acts as: with the bot's (an admin) key,
        ``/search.json`` returns read-restricted categories and whispers (``lib/search.rb`` reads
        ``guardian.secure_category_ids``; admins are whisperers). The reader is anonymous by default:
        no key is sent, so the admin-API bucket is not spent (``DefaultCurrentUserProvider`` counts
        every request with a key) and Discourse's own anonymous limits apply
        (``SearchController#rate_limit_search``). ``discourse.reader_username`` names a member with no
        groups instead, for forums where anonymous visitors may not read (``login_required``)."""
        return DiscourseClient(
            self._http, self._settings, budget=self._budget, priority=self._priority, reader=True
        )

    # -- reads ---------------------------------------------------------------------------------

    def get_post(self, post_id: int) -> ForumPost:
        """``GET /posts/{id}.json``: one post, with its ``raw`` Markdown."""
        return ForumPost.from_json(self._request("GET", f"/posts/{int(post_id)}.json"))

    def get_latest_posts(self, *, before: int | None = None) -> list[ForumPost]:
        """``GET /posts.json?before=N`` (PostsController#latest): the latest posts the caller may see
        with ids below ``before`` (the newest without it), newest first, 50 a page, with their raw."""
        params = {"before": int(before)} if before is not None else None
        data = self._request("GET", "/posts.json", params=params)
        items = data.get("latest_posts") or []
        return [ForumPost.from_json(p) for p in items if isinstance(p, Mapping) and "id" in p]

    def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic:
        """``GET /t/{id}.json``; with ``all_posts`` the rest of the stream is fetched 20 ids at a time."""
        data = self._request("GET", f"/t/{int(topic_id)}.json")
        stream = data.get("post_stream") or {}
        posts = [ForumPost.from_json(p, topic=data) for p in stream.get("posts") or []]
        if all_posts:
            have = {p.id for p in posts}
            missing = [int(i) for i in stream.get("stream") or [] if int(i) not in have]
            for start in range(0, len(missing), POST_IDS_PER_REQUEST):
                chunk = missing[start : start + POST_IDS_PER_REQUEST]
                page = self._request(
                    "GET", f"/t/{int(topic_id)}/posts.json", params=[("post_ids[]", i) for i in chunk]
                )
                posts.extend(
                    ForumPost.from_json(p, topic=data)
                    for p in (page.get("post_stream") or {}).get("posts") or []
                )
            posts.sort(key=lambda p: p.post_number)
        return ForumTopic.from_json(data, posts=tuple(posts))

    def get_user(self, user_id: int) -> Member:
        """``GET /admin/users/{id}.json`` (staff only; Admin::UsersController#show renders
        AdminDetailedUserSerializer without a root): trust level, admin, moderator, staged, silenced,
        suspended and every group of the account. A bot account without staff rights gets
        ``NotFoundError``, like a missing account (the admin routes sit under ``StaffConstraint``)."""
        data = self._request("GET", f"/admin/users/{int(user_id)}.json")
        return Member.from_json(data, complete=True)

    def get_user_by_username(self, username: str) -> Member:
        """``GET /u/{username}.json`` (UsersController#show, UserSerializer under ``user``): trust level,
        admin, moderator, suspension and the groups the caller may see; no silenced field, and ``staged``
        only for a staff caller, so the account is ``complete`` only when that field is there."""
        data = self._request("GET", f"/u/{quote(username, safe='')}.json")
        user = data.get("user")
        if not isinstance(user, Mapping):
            raise PermanentError(f"GET /u/{username}.json: answer without a user", service=SERVICE)
        return Member.from_json(user, complete=False)

    def search(self, query: str, *, limit: int = 25) -> list[SearchHit]:
        """``GET /search.json?q=…``: one post per topic, best first, as Discourse ranks them."""
        data = self._request("GET", "/search.json", params={"q": query})
        topics = {int(t["id"]): t for t in data.get("topics") or [] if "id" in t}
        hits: list[SearchHit] = []
        for post in data.get("posts") or []:
            topic = topics.get(int(post.get("topic_id", 0)), {})
            hits.append(
                SearchHit(
                    post_id=int(post["id"]),
                    topic_id=int(post["topic_id"]),
                    post_number=int(post.get("post_number", 1)),
                    topic_slug=str(topic.get("slug") or ""),
                    topic_title=str(topic.get("title") or ""),
                    blurb=str(post.get("blurb") or ""),
                    category_id=optional_int(topic.get("category_id")),
                )
            )
            if len(hits) >= limit:
                break
        return hits

    def get_notifications(self, *, offset: int = 0) -> list[Notification]:
        """``GET /notifications.json`` as the API user: one page of its notifications, newest first;
        ``offset`` pages back (Discourse serves 60 a page)."""
        data = self._request("GET", "/notifications.json", params={"offset": offset} if offset else None)
        out: list[Notification] = []
        for item in data.get("notifications") or []:
            extra = item.get("data") or {}
            post_id = extra.get("original_post_id")
            out.append(
                Notification(
                    id=int(item["id"]),
                    kind=NOTIFICATION_KINDS.get(int(item.get("notification_type", 0)), "other"),
                    topic_id=int(item.get("topic_id") or 0),
                    post_number=int(item.get("post_number") or 0),
                    post_id=int(post_id) if post_id is not None else None,
                    created_at=str(item.get("created_at") or ""),
                )
            )
        return out

    def get_category(self, category_id: int) -> ForumCategory:
        """``GET /c/{id}/show.json`` (CategoriesController#show, CategorySerializer): one category, with
        ``read_restricted``; 404 when the forum has no such category (or will not show it)."""
        data = self._request("GET", f"/c/{int(category_id)}/show.json")
        category = data.get("category")
        if not isinstance(category, Mapping) or "id" not in category:
            raise PermanentError(f"GET /c/{int(category_id)}/show.json: no category", service=SERVICE)
        return ForumCategory.from_json(category)

    def get_site_categories(self) -> tuple[ForumCategory, ...]:
        """``GET /site.json``'s categories: those the API user may see; with lazy-loaded categories only
        its sidebar's and their parents (a partial list)."""
        data = self._request("GET", "/site.json")
        return tuple(ForumCategory.from_json(c) for c in data.get("categories") or [] if "id" in c)

    def get_tag_groups(self) -> tuple[TagGroup, ...]:
        """``GET /tag_groups.json`` (staff): the tag groups and who may see their tags."""
        return TagGroup.all_from_json(self._request("GET", "/tag_groups.json"))

    def get_web_hooks(self) -> list[dict[str, Any]]:
        """``GET /admin/api/web_hooks.json`` (admin; Admin::WebHooksController#index): the forum's
        webhooks as AdminWebHookSerializer shows them, every page (50 a page)."""
        hooks: list[dict[str, Any]] = []
        while True:
            data = self._request("GET", "/admin/api/web_hooks.json", params={"offset": len(hooks)})
            page = [h for h in data.get("web_hooks") or [] if isinstance(h, dict)]
            hooks.extend(page)
            total = optional_int(data.get("total_rows_web_hooks"))
            if not page or total is None or len(hooks) >= total:
                return hooks

    # -- writes --------------------------------------------------------------------------------

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost:
        """``GET /posts/by_number/{topic_id}/{post_number}.json``: the post at that place of a topic."""
        return ForumPost.from_json(
            self._request("GET", f"/posts/by_number/{int(topic_id)}/{int(post_number)}.json")
        )

    def create_post(
        self, topic_id: int, raw: str, *, reply_to_post_number: int | None = None
    ) -> ForumPost | PendingPost:
        """``POST /posts.json``: a reply in ``topic_id``, as the API user. When Discourse holds the post
        for review it answers 200 ``{"action": "enqueued", "pending_post": …}`` without a post: that
        is a ``PendingPost``, a final outcome (posting again would queue another copy)."""
        body: Json = {"topic_id": int(topic_id), "raw": raw}
        if reply_to_post_number is not None:
            body["reply_to_post_number"] = int(reply_to_post_number)
        data = self._request("POST", "/posts.json", json=body)
        if data.get("action") == "enqueued" or ("id" not in data and "pending_post" in data):
            raw_pending = data.get("pending_post")
            pending: Mapping[str, Any] = raw_pending if isinstance(raw_pending, Mapping) else {}
            return PendingPost(
                int(topic_id), optional_int(pending.get("id")), optional_int(data.get("pending_count"))
            )
        if "id" not in data:
            raise PermanentError("POST /posts.json: answer without a post id", service=SERVICE)
        return ForumPost.from_json(data)

    # -- admin API -----------------------------------------------------------------------------

    def get_site_settings(self, names: Sequence[str]) -> dict[str, object]:
        """Values of the named site settings of the companion plugin (admin API, ``?plugin=citebot``);
        unknown names are absent."""
        wanted = set(names)
        data = self._request("GET", "/admin/site_settings.json", params={"plugin": SETTINGS_PLUGIN})
        out: dict[str, object] = {}
        for item in data.get("site_settings") or []:
            name = item.get("setting")
            if name in wanted:
                out[str(name)] = _setting_value(item)
        return out

    def set_site_setting(self, name: str, value: object) -> None:
        """``PUT /admin/site_settings/{name}.json`` (admin API)."""
        if isinstance(value, bool):
            value = "true" if value else "false"
        self._request("PUT", f"/admin/site_settings/{name}.json", json={name: value})

    # -- transport -----------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Json | None = None,
    ) -> Json:
        keyed = not self.anonymous
        headers = {"Accept": "application/json"}
        if keyed:
            self._budget.acquire(self._priority)
            headers["Api-Key"] = self._settings.api_key.get_secret_value()
            headers["Api-Username"] = self.identity
        what = f"{method} {path}"
        response = outbound.send(
            self._http,
            SERVICE,
            method,
            self._base + path,
            what=what,
            params=params,
            json=json,
            headers=headers,
        )
        if response.is_success:
            data = outbound.json_body(SERVICE, response, what=what) if response.content else {}
            return data if isinstance(data, dict) else {"items": data}
        error = map_error(method, path, response)
        if isinstance(error, RateLimitedError) and keyed:
            # The site's budget is spent (by us or by another integration): everyone waits. An
            # anonymous 429 is Discourse's per-address limit, not the admin bucket: only this call fails.
            self._budget.pause(error.retry_after if error.retry_after is not None else 60.0)
        raise error


def map_error(method: str, path: str, response: httpx.Response) -> CitebotError:
    """Our error for a non-2xx Discourse response, by ``worker.clients.http``'s table."""
    return outbound.status_error(SERVICE, response, what=f"{method} {path}")


def _setting_value(item: Mapping[str, Any]) -> object:
    value = item.get("value")
    if item.get("type") == "bool" and isinstance(value, str):
        return value.strip().lower() == "true"
    return value
