"""An in-memory ``Forum`` for unit tests: posts, topics, search by word overlap, site settings, the
bot's notifications (what the catch-up poller reads) and the members behind the posts.

Every author of a post is a member (trust level 1 and its automatic groups, no penalty: a new account
once it has read a little) until ``set_member`` says otherwise; the bot is an admin. ``get_user``
answers as ``GET /admin/users/{id}.json`` would, 404 when ``bot_is_staff`` is off, like Discourse to a
caller without staff rights (its admin routes sit under ``StaffConstraint``); ``get_user_by_username``
as ``/u/{username}.json`` (an incomplete ``Member``).

A real implementation of the protocol (not a mock): it keeps state, assigns ids, and records every
post the bot creates, so tests assert on what the forum would show.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from worker.domain import (
    ForumCategory,
    ForumPost,
    ForumTopic,
    Member,
    Notification,
    NotificationKind,
    SearchHit,
    TagGroup,
)
from worker.errors import CitebotError, NotFoundError

_WORD = re.compile(r"\w{3,}")
# Group::AUTO_GROUPS (app/models/group.rb): the automatic groups and their ids.
AUTO_GROUP_IDS = {"admins": 1, "moderators": 2, "staff": 3} | {f"trust_level_{n}": 10 + n for n in range(5)}


def automatic_groups(trust_level: int, *, admin: bool = False, moderator: bool = False) -> frozenset[str]:
    """The automatic groups of an account, by name and by id (``Group.refresh_automatic_groups!``: every
    trust level up to its own, staff for admins and moderators)."""
    names = [f"trust_level_{n}" for n in range(trust_level + 1)]
    names += (["admins"] if admin else []) + (["moderators"] if moderator else [])
    names += ["staff"] if admin or moderator else []
    return frozenset(names) | frozenset(str(AUTO_GROUP_IDS[n]) for n in names)


class FakeForum:
    def __init__(self, bot: str = "citebot") -> None:
        self.bot = bot
        self.posts: dict[int, ForumPost] = {}
        self.topics: dict[int, ForumTopic] = {}
        self.settings: dict[str, object] = {}
        self.created: list[ForumPost] = []
        self.fail_create: list[CitebotError] = []
        self.fail_settings: CitebotError | None = None
        self.notifications: list[Notification] = []
        self.by_number_calls = 0
        self.members: dict[int, Member] = {
            -5: Member(-5, bot, trust_level=4, admin=True, groups=automatic_groups(4, admin=True))
        }
        self.user_reads: list[int | str] = []
        self.topic_reads: list[int] = []
        self.bot_is_staff = True
        # What /c/{id}/show.json and /site.json say; a category missing here is a 404. Categories 1 and
        # 10 (the defaults of the tests' topics) are public. ``site_lists`` limits /site.json to some.
        self.categories: dict[int, ForumCategory] = {
            1: ForumCategory(1, "General", False),
            10: ForumCategory(10, "Support", False),
        }
        self.site_lists: set[int] | None = None
        self.tag_groups: list[TagGroup] = []
        self.calls: list[str] = []
        self._ids = itertools.count(100_000)

    def add_topic(self, topic_id: int, title: str, slug: str, category_id: int | None = 1) -> None:
        self.topics[topic_id] = ForumTopic(topic_id, title, slug, category_id)

    def set_topic(self, topic_id: int, **changes: object) -> ForumTopic:
        """Change fields of a topic (closed, archived, ``archetype="private_message"`` with
        ``allowed_users`` …), as a moderator or a PM invitation would."""
        topic = replace(self.topics[topic_id], **changes)  # type: ignore[arg-type]
        self.topics[topic_id] = topic
        return topic

    def set_member(self, user_id: int, username: str, **fields: Any) -> Member:
        """Make the account ``user_id`` what a test needs (trust level, groups, silenced, staged …); its
        automatic groups follow from the trust level and staff flags, ``groups`` adds the others."""
        groups = frozenset(str(g).lower() for g in fields.pop("groups", ()))
        auto = automatic_groups(
            int(fields.get("trust_level", 0)),
            admin=bool(fields.get("admin", False)),
            moderator=bool(fields.get("moderator", False)),
        )
        member = Member(user_id, username, groups=groups | auto, **fields)
        self.members[user_id] = member
        return member

    def add_post(
        self,
        post_id: int,
        topic_id: int,
        post_number: int,
        raw: str,
        *,
        username: str = "member",
        user_id: int = 7,
        reply_to_post_number: int | None = None,
    ) -> ForumPost:
        topic = self.topics[topic_id]
        post = ForumPost(
            id=post_id,
            topic_id=topic_id,
            post_number=post_number,
            username=username,
            user_id=user_id,
            cooked=f"<p>{raw}</p>",
            raw=raw,
            reply_to_post_number=reply_to_post_number,
            topic_slug=topic.slug,
            topic_title=topic.title,
            category_id=topic.category_id,
        )
        self.posts[post_id] = post
        if user_id not in self.members:
            self.members[user_id] = Member(user_id, username, trust_level=1, groups=automatic_groups(1))
        return post

    def put_topic(self, topic: ForumTopic) -> None:
        """Make ``topic`` and exactly its ``posts`` what the forum shows (a new topic, a rename, a move
        to another category, posts added or gone), as the index's refreshes then read it."""
        self.remove_topic(topic.id)
        self.topics[topic.id] = replace(topic, posts=())
        self.posts.update((p.id, p) for p in topic.posts)

    def remove_topic(self, topic_id: int) -> None:
        """The topic and its posts are gone (deleted, or no longer visible to the bot)."""
        self.topics.pop(topic_id, None)
        for post_id in [p.id for p in self.posts.values() if p.topic_id == topic_id]:
            del self.posts[post_id]

    def edit_post(self, post_id: int, **changes: object) -> ForumPost:
        """Change fields of a post (an edit, a deletion, hiding), as Discourse would before its webhook."""
        post = replace(self.posts[post_id], **changes)  # type: ignore[arg-type]
        self.posts[post_id] = post
        return post

    # -- Forum protocol --------------------------------------------------------------------------

    def get_post(self, post_id: int) -> ForumPost:
        if post_id not in self.posts:
            raise NotFoundError(f"post {post_id}", service="discourse", status=404)
        return self.posts[post_id]

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost:
        self.by_number_calls += 1
        for post in self.posts.values():
            if post.topic_id == topic_id and post.post_number == post_number:
                return post
        raise NotFoundError(f"post #{post_number} of topic {topic_id}", service="discourse", status=404)

    def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic:
        self.topic_reads.append(topic_id)
        if topic_id not in self.topics:
            raise NotFoundError(f"topic {topic_id}", service="discourse", status=404)
        topic = self.topics[topic_id]
        posts = sorted(
            (p for p in self.posts.values() if p.topic_id == topic_id), key=lambda p: p.post_number
        )
        # TopicView's post stream has no raw: PostSerializer adds it only with ``include_raw``
        # (app/serializers/post_stream_serializer_mixin.rb); ``/posts/{id}.json`` has it.
        return replace(topic, posts=tuple(replace(p, raw=None) for p in posts))

    def search(self, query: str, *, limit: int = 25) -> list[SearchHit]:
        terms = {w.lower() for w in _WORD.findall(query)}
        # Discourse's aggregate search (lib/search.rb ``aggregate_post_sql``): a topic is returned by its
        # first matching post (min post_number), ranked by its best post's score.
        best: dict[int, tuple[int, ForumPost]] = {}
        for post in sorted(self.posts.values(), key=lambda p: (p.topic_id, p.post_number)):
            words = {w.lower() for w in _WORD.findall(post.raw or "")} | {
                w.lower() for w in _WORD.findall(post.topic_title)
            }
            if not terms or not terms <= words or post.username == self.bot:
                continue
            score = len(terms & words)
            if post.topic_id not in best:
                best[post.topic_id] = (score, post)
            elif score > best[post.topic_id][0]:
                best[post.topic_id] = (score, best[post.topic_id][1])
        ranked = sorted(best.values(), key=lambda sp: (-sp[0], sp[1].id))[:limit]
        return [
            SearchHit(p.id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, (p.raw or "")[:100])
            for _, p in ranked
        ]

    def create_post(self, topic_id: int, raw: str, *, reply_to_post_number: int | None = None) -> ForumPost:
        if self.fail_create:
            raise self.fail_create.pop(0)
        number = 1 + max((p.post_number for p in self.posts.values() if p.topic_id == topic_id), default=0)
        post = self.add_post(
            next(self._ids),
            topic_id,
            number,
            raw,
            username=self.bot,
            user_id=-5,
            reply_to_post_number=reply_to_post_number,
        )
        self.created.append(post)
        return post

    def notify(self, post: ForumPost, kind: NotificationKind, created_at: str) -> Notification:
        """Tell the bot about ``post`` (a mention of it, a reply to it, …), as Discourse would."""
        note = Notification(
            len(self.notifications) + 1, kind, post.topic_id, post.post_number, post.id, created_at
        )
        self.notifications.append(note)
        return note

    def get_notifications(self, *, offset: int = 0) -> list[Notification]:
        """The bot's notifications, newest first, 60 a page, like Discourse."""
        newest_first = sorted(self.notifications, key=lambda n: n.id, reverse=True)
        return newest_first[offset : offset + 60]

    def get_user(self, user_id: int) -> Member:
        self.user_reads.append(user_id)
        if not self.bot_is_staff:  # the admin routes' StaffConstraint: no route for a non-staff caller
            raise NotFoundError("GET /admin/users: not staff", service="discourse", status=404)
        if user_id not in self.members:
            raise NotFoundError(f"user {user_id}", service="discourse", status=404)
        return self.members[user_id]

    def get_user_by_username(self, username: str) -> Member:
        self.user_reads.append(username)
        for member in self.members.values():
            if member.username.lower() == username.lower():
                return replace(member, silenced=False, staged=False, complete=False)
        raise NotFoundError(f"user {username}", service="discourse", status=404)

    def get_category(self, category_id: int) -> ForumCategory:
        self.calls.append(f"category {category_id}")
        if category_id not in self.categories:
            raise NotFoundError(f"category {category_id}", service="discourse", status=404)
        return self.categories[category_id]

    def get_site_categories(self) -> tuple[ForumCategory, ...]:
        self.calls.append("site")
        return tuple(
            c for cid, c in self.categories.items() if self.site_lists is None or cid in self.site_lists
        )

    def get_tag_groups(self) -> tuple[TagGroup, ...]:
        self.calls.append("tag_groups")
        return tuple(self.tag_groups)

    def get_site_settings(self, names: Sequence[str]) -> dict[str, object]:
        if self.fail_settings is not None:
            raise self.fail_settings
        return {n: self.settings[n] for n in names if n in self.settings}

    def flags_on(self, **overrides: bool) -> None:
        names = ("enabled", "posts_pipeline", "input_gate", "rerank", "post_links", "intent_layer")
        for name in names:
            self.settings[f"citebot_{name}"] = overrides.get(name, True)
        # The plugin's summon settings at their declared defaults (a test changes them in ``settings``).
        for name, default in (("allowed_groups", ""), ("min_trust_level", "1"), ("refusal_notice", "none")):
            self.settings.setdefault(f"citebot_{name}", default)
