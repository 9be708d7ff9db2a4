"""What a forum member does in the demo, over the local forum's Discourse API: ask, wait, follow links."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import httpx

# Markdown links the sanitizer writes: [n](<base>/t/<slug>/<topic_id>/<post_number>)
_LINK = re.compile(r"\]\((?P<url>[^)\s]*/t/[a-z0-9-]+/\d+(?:/\d+)?)\)")
_PATH = re.compile(r"^/t/(?P<slug>[a-z0-9-]+)/(?P<topic>\d+)(?:/(?P<post>\d+))?$")


@dataclass(frozen=True, slots=True)
class Question:
    label: str
    title: str
    raw: str
    # the forum topic whose answer the reply should cite first (0: none, the bot should abstain)
    expect_topic: int = 0
    topic_id: int = 0
    post_id: int = 0
    post_number: int = 1
    asked_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Reply:
    post_id: int
    raw: str
    seen_after_s: float


class ForumMember:
    """A member of the local forum over one ``httpx.Client``: posts with the member's own User API key
    (``User-Api-Key``: acts as that member only, with its own 20-a-minute limit, never the site-wide
    admin-API budget the bot lives on) and reads what any reader sees, without a key."""

    def __init__(self, http: httpx.Client, base_url: str, admin_session: str, username: str) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.admin_session = admin_session  # an admin's browser session: adding members is an admin's job
        self.username = username
        self.user_api_key = ""

    def _headers(self) -> dict[str, str]:
        if not self.user_api_key:
            raise RuntimeError(f"{self.username} has no User API key yet: call join() first")
        return {"User-Api-Key": self.user_api_key}

    def join(self) -> str:
        """Add the member (``POST /__forum/users``, as an admin) and get its User API key
        (``POST /__forum/user-api-keys``); returns the key."""
        self.user_api_key = add_member(self.http, self.base_url, self.admin_session, self.username)
        return self.user_api_key

    def ask(self, question: Question) -> Question:
        """Open a new topic whose first post mentions the bot."""
        r = self.http.post(
            f"{self.base_url}/posts.json",
            headers=self._headers(),
            json={"title": question.title, "raw": question.raw},
        )
        r.raise_for_status()
        body = r.json()
        return replace(
            question,
            topic_id=int(body["topic_id"]),
            post_id=int(body["id"]),
            post_number=int(body.get("post_number", 1)),
            asked_at=time.monotonic(),
        )

    def reply_to(self, question: Question, bot: str) -> Reply | None:
        """The bot's reply to ``question`` if it is on the forum yet."""
        r = self.http.get(f"{self.base_url}/t/{question.topic_id}.json")
        r.raise_for_status()
        for post in r.json()["post_stream"]["posts"]:
            if str(post.get("username", "")).lower() == bot.lower() and post.get("reply_to_post_number") in (
                question.post_number,
                None,
            ):
                return Reply(
                    int(post["id"]), self.raw_of(int(post["id"])), time.monotonic() - question.asked_at
                )
        return None

    def raw_of(self, post_id: int) -> str:
        r = self.http.get(f"{self.base_url}/posts/{post_id}.json")
        r.raise_for_status()
        return str(r.json().get("raw") or "")

    def resolves(self, url: str) -> tuple[bool, str]:
        """Whether a citation link opens on this forum: the page itself, else its topic's JSON with the
        cited post number in the stream (the local forum serves JSON routes, not HTML pages)."""
        parts = urlsplit(url)
        if parts.netloc and f"{parts.scheme}://{parts.netloc}" != self.base_url:
            return False, "points to another host"
        r = self.http.get(f"{self.base_url}{parts.path}")
        if r.status_code == 200:
            return True, f"GET {parts.path} → 200"
        match = _PATH.match(parts.path)
        if match is None:
            return False, f"GET {parts.path} → {r.status_code}"
        topic = self.http.get(f"{self.base_url}/t/{match['slug']}/{match['topic']}.json")
        if topic.status_code != 200:
            return False, f"GET /t/{match['slug']}/{match['topic']}.json → {topic.status_code}"
        data: dict[str, Any] = topic.json()
        if data.get("slug") != match["slug"]:
            return False, f"slug {match['slug']!r} is not the topic's ({data.get('slug')!r})"
        wanted = int(match["post"] or 1)
        numbers = {int(p["post_number"]) for p in data["post_stream"]["posts"]}
        if wanted not in numbers and wanted > int(data.get("highest_post_number", 0)):
            return False, f"topic {match['topic']} has no post #{wanted}"
        return True, f"GET /t/{match['slug']}/{match['topic']}.json → 200, post #{wanted} exists"


def add_member(http: httpx.Client, base_url: str, admin_session: str, username: str) -> str:
    """Add ``username`` to the local forum as a member (trust level 1) and mint its User API key; the
    forum answers 403 to requests as a username it does not know. Returns the key."""
    admin = {"Api-Key": admin_session, "Api-Username": "system"}
    base = base_url.rstrip("/")
    r = http.post(f"{base}/__forum/users", headers=admin, json={"username": username})
    r.raise_for_status()
    r = http.post(f"{base}/__forum/user-api-keys", headers=admin, json={"username": username})
    r.raise_for_status()
    return str(r.json()["key"])


def links_in(raw: str) -> list[str]:
    """The citation links in a reply, in order, without repeats."""
    return list(dict.fromkeys(m["url"] for m in _LINK.finditer(raw)))


def cited_topic(url: str) -> int | None:
    """The topic id of a citation link (``…/t/<slug>/<topic id>[/<post number>]``), None for another URL."""
    m = _PATH.match(urlsplit(url).path)
    return int(m["topic"]) if m else None
