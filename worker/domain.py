"""Frozen value types that travel between the stages of the pipeline.

Clients return these (never raw JSON); the pipeline, backfill and eval consume them. The one reading of
Discourse's post JSON is ``ForumPost.from_json``, and of its topic JSON ``ForumTopic.from_json``: the
REST client, the webhook and the backfill's ``api`` and ``file`` sources all read posts through them
(the backfill's shape, ``SourcePost``, is built from a ``ForumPost`` by ``backfill.sources.discourse_json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Zone = Literal["abstain", "weak", "normal"]
EmbedKind = Literal["query", "passage"]


@dataclass(frozen=True, slots=True)
class ForumPost:
    """A post as Discourse serves it (``/posts/{id}.json``, a topic's post stream, or a webhook).

    ``deleted``: the post is not its author's words any more, by either of Discourse's two deletions
    (``PostSerializer`` sends both fields on every post; ``lib/post_destroyer.rb``):

    - *trashed*, ``deleted_at`` set: staff deleted it, or the stub below was cleaned up after
      ``delete_removed_posts_after`` hours (``PostDestroyer#perform_delete``);
    - *withdrawn*, ``user_deleted`` true and ``deleted_at`` null: its author deleted it
      (``PostDestroyer#mark_for_deletion``). The post stays in the topic for every reader, its raw
      replaced by "(post deleted by author)", and the author may recover it (``user_recovered``).

    Neither is evidence, an answer to give, or a question to answer. ``hidden`` (flagged: its cooked
    is withheld from non-staff) and ``post_type`` (1 regular, 2 moderator action, 3 small action,
    4 whisper) are read as sent.
    """

    id: int
    topic_id: int
    post_number: int
    username: str
    user_id: int
    cooked: str = ""
    raw: str | None = None
    post_type: int = 1
    reply_to_post_number: int | None = None
    reply_to_username: str | None = None
    version: int = 1
    hidden: bool = False
    deleted: bool = False
    topic_slug: str = ""
    topic_title: str = ""
    category_id: int | None = None
    archetype: str = "regular"
    created_at: str | None = None
    updated_at: str | None = None
    like_count: int = 0
    accepted_answer: bool = False  # discourse-solved's post field: the topic's accepted solution

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, topic: Mapping[str, Any] | None = None) -> ForumPost:
        """The post in Discourse's post JSON (``/posts/{id}.json``, a stream entry of ``topic``, or a
        webhook payload): the one mapping, pure (no I/O), used by the REST client and the webhook."""
        reply_to_user = data.get("reply_to_user") or {}
        topic = topic or {}
        return cls(
            id=int(data["id"]),
            topic_id=int(data.get("topic_id") or topic.get("id") or 0),
            post_number=int(data.get("post_number") or 0),
            username=str(data.get("username") or ""),
            user_id=int(data.get("user_id") or 0),
            cooked=str(data.get("cooked") or ""),
            raw=data.get("raw") if isinstance(data.get("raw"), str) else None,
            post_type=int(data.get("post_type") or 1),
            reply_to_post_number=optional_int(data.get("reply_to_post_number")),
            reply_to_username=reply_to_user.get("username") if isinstance(reply_to_user, Mapping) else None,
            version=int(data.get("version") or 1),
            hidden=bool(data.get("hidden", False)),
            deleted=is_deleted(data),
            topic_slug=str(data.get("topic_slug") or topic.get("slug") or ""),
            topic_title=str(data.get("topic_title") or topic.get("title") or ""),
            category_id=optional_int(data.get("category_id", topic.get("category_id"))),
            archetype=str(data.get("topic_archetype") or topic.get("archetype") or "regular"),
            created_at=data.get("created_at"),
            updated_at=data.get("updated_at"),
            like_count=_like_count(data),
            accepted_answer=data.get("accepted_answer") is True,
        )


def is_deleted(data: Mapping[str, Any]) -> bool:
    """Trashed (``deleted_at``) or withdrawn by its author (``user_deleted``): ``ForumPost.deleted``."""
    return data.get("deleted_at") is not None or data.get("user_deleted") is True


def tag_names(tags: object) -> tuple[str, ...]:
    """A topic's tags as plain names (Discourse sends strings, or ``{"name": …}`` objects since 3.2)."""
    if not isinstance(tags, list):
        return ()
    names = [t.get("name") if isinstance(t, Mapping) else t for t in tags]
    return tuple(str(n) for n in names if n)


LIKE_ACTION_ID = 2  # PostActionType.types[:like]


def _like_count(data: Mapping[str, Any]) -> int:
    """A post's likes: ``like_count`` where the serializer has it (search posts), else the count of
    the like entry of ``actions_summary`` (PostSerializer#actions_summary, which drops a zero count)."""
    if isinstance(data.get("like_count"), int):
        return int(data["like_count"])
    for action in data.get("actions_summary") or []:
        if isinstance(action, Mapping) and action.get("id") == LIKE_ACTION_ID:
            return int(action.get("count") or 0)
    return 0


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message of the questions queue: the post to answer, and who saw it (webhook, poller)."""

    post_id: int
    topic_id: int
    version: int
    source: str = "webhook"


@dataclass(frozen=True, slots=True)
class PendingPost:
    """A post Discourse put in its review queue instead of publishing (``{"action": "enqueued",
    "pending_post": {...}}``): there is no post id, and a moderator decides whether it ever appears."""

    topic_id: int
    pending_id: int | None = None
    pending_count: int | None = None


@dataclass(frozen=True, slots=True)
class ForumTopic:
    """A topic with the posts of its stream (all pages merged when the caller asked for them).

    ``closed``, ``archived`` and ``can_reply`` are as the caller sees them (TopicViewSerializer;
    ``can_reply`` is ``details.can_create_post``, which Discourse includes only when true).
    ``allowed_users`` (usernames) and ``allowed_groups`` (group names) are a private message's
    participants (TopicViewDetailsSerializer: a user allowed through a group is listed only under the
    group); empty for a regular topic.
    """

    id: int
    title: str
    slug: str
    category_id: int | None
    archetype: str = "regular"
    visible: bool = True
    deleted: bool = False
    tags: tuple[str, ...] = ()
    posts: tuple[ForumPost, ...] = ()
    closed: bool = False
    archived: bool = False
    can_reply: bool = True
    allowed_users: tuple[str, ...] = ()
    allowed_groups: tuple[str, ...] = ()

    @property
    def private_message(self) -> bool:
        return self.archetype == "private_message"

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, posts: tuple[ForumPost, ...] | None = None) -> ForumTopic:
        """The topic in Discourse's topic JSON (``/t/{id}.json``, TopicViewSerializer): the one mapping.

        ``posts``: the topic's posts when the caller has read them (all pages); by default those of the
        JSON's first stream page."""
        if posts is None:
            stream = data.get("post_stream")
            entries = stream.get("posts") if isinstance(stream, Mapping) else None
            posts = tuple(ForumPost.from_json(p, topic=data) for p in entries or () if isinstance(p, Mapping))
        raw_details = data.get("details")
        details: Mapping[str, Any] = raw_details if isinstance(raw_details, Mapping) else {}
        return cls(
            id=int(data["id"]),
            title=str(data.get("title") or ""),
            slug=str(data.get("slug") or ""),
            category_id=optional_int(data.get("category_id")),
            archetype=str(data.get("archetype") or "regular"),
            visible=bool(data.get("visible", True)),
            deleted=data.get("deleted_at") is not None,
            tags=tag_names(data.get("tags")),
            posts=posts,
            closed=bool(data.get("closed", False)),
            archived=bool(data.get("archived", False)),
            # TopicViewDetailsSerializer#include_can_create_post?: present (true) only when we may reply.
            can_reply=details.get("can_create_post") is True,
            allowed_users=_names(details.get("allowed_users"), "username"),
            allowed_groups=_names(details.get("allowed_groups"), "name"),
        )


def _names(items: object, key: str) -> tuple[str, ...]:
    """The ``key`` of each object of a JSON list (``allowed_users`` / ``allowed_groups``)."""
    if not isinstance(items, list):
        return ()
    return tuple(str(i[key]) for i in items if isinstance(i, Mapping) and i.get(key))


@dataclass(frozen=True, slots=True)
class Member:
    """A forum account as far as deciding whether it may summon the bot needs it.

    Read from ``GET /admin/users/{id}.json`` (AdminDetailedUserSerializer: every field) or, for a bot
    account without staff rights, ``GET /u/{username}.json`` (UserSerializer: no silenced field at all,
    ``staged`` shown to staff only), which leaves ``complete`` False: silenced and staged are unknown
    there. ``groups`` holds the lower-cased names and the ids (as text) of every group the account is
    in, automatic ones (``trust_level_1``, ``staff``) included.
    """

    id: int
    username: str
    trust_level: int = 0
    admin: bool = False
    moderator: bool = False
    staged: bool = False
    silenced: bool = False
    suspended: bool = False
    groups: frozenset[str] = frozenset()
    complete: bool = True

    @property
    def staff(self) -> bool:
        return self.admin or self.moderator

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, complete: bool, now: datetime | None = None) -> Member:
        """The account in an admin (``complete``) or public user JSON; pure but for ``now``.

        Discourse serializes ``silenced_till``/``suspended_till`` when they are set, even once past
        (AdminUserListSerializer ``include_silenced_till?`` is ``silenced_till?``), so a date counts only
        while it is in the future; the booleans ``silenced``/``suspended`` are there only while true."""
        moment = now or datetime.now(UTC)
        groups: set[str] = set()
        for group in data.get("groups") or []:
            if isinstance(group, Mapping):
                if group.get("name"):
                    groups.add(str(group["name"]).lower())
                if optional_int(group.get("id")) is not None:
                    groups.add(str(int(group["id"])))
        return cls(
            id=int(data.get("id") or 0),
            username=str(data.get("username") or ""),
            trust_level=optional_int(data.get("trust_level")) or 0,
            admin=bool(data.get("admin", False)),
            moderator=bool(data.get("moderator", False)),
            staged=bool(data.get("staged", False)),
            silenced=bool(data.get("silenced", False)) or _until_later(data.get("silenced_till"), moment),
            suspended=bool(data.get("suspended", False)) or _until_later(data.get("suspended_till"), moment),
            groups=frozenset(groups),
            complete=complete,
        )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One result of Discourse's ``/search.json`` (one post per topic, best first)."""

    post_id: int
    topic_id: int
    post_number: int
    topic_slug: str
    topic_title: str
    blurb: str
    category_id: int | None = None


NotificationKind = Literal["mentioned", "replied", "private_message", "other"]


@dataclass(frozen=True, slots=True)
class Notification:
    """A notification of the bot user: a mention of it, or a reply to one of its posts."""

    id: int
    kind: NotificationKind
    topic_id: int
    post_number: int
    post_id: int | None
    created_at: str


@dataclass(frozen=True, slots=True)
class Candidate:
    """A post competing for a place in the evidence, with every score it has collected."""

    post_id: int
    topic_id: int
    post_number: int
    topic_slug: str
    topic_title: str
    text: str
    category_id: int | None = None
    cosine: float | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None
    lexical: float | None = None  # the lexical channel's score (worker/retrieval/lexical.py)
    lexical_rank: int | None = None
    fused: float | None = None
    logit: float | None = None
    stage: float | None = None  # the second stage's score (worker/retrieval/stage.py)

    @property
    def body(self) -> str:
        """The post's own text: the indexed text minus the title/category/tags head the backfill adds
        (what the cross-encoder reads after the title, and what excerpts are cut from)."""
        text = self.text
        title = self.topic_title.strip()
        if title and text.startswith(title) and "\n\n" in text:
            return text.split("\n\n", 1)[1].strip()
        return text.strip()


@dataclass(frozen=True, slots=True)
class Source:
    """A numbered source ``[[n]]`` given to the LLM and resolved into a link by the sanitizer."""

    n: int
    post_id: int
    topic_id: int
    post_number: int
    slug: str
    title: str
    excerpt: str
    score: float | None = None
    context: tuple[str, ...] = ()

    def as_evidence(self) -> dict[str, object]:
        """The shape the sanitizer and ``citebot sanitize --evidence`` read."""
        return {
            "n": self.n,
            "topic_id": self.topic_id,
            "post_number": self.post_number,
            "slug": self.slug,
            "title": self.title,
        }


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    """What a chat model returned."""

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    offline: bool = False


def _until_later(value: object, now: datetime) -> bool:
    """An ISO 8601 ``…_till`` date still ahead of ``now`` (an unreadable date counts as ahead: a penalty
    the bot cannot date is one it must respect)."""
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        until = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return True
    if until.tzinfo is None:
        until = until.replace(tzinfo=UTC)
    return until > now


def optional_int(value: object) -> int | None:
    """A JSON field read as an int: None when absent, a boolean, or not a number."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class ForumCategory:
    """A category as the forum describes it (``/c/{id}/show.json``, ``/site.json``, a category webhook,
    the ``categories`` table of a replica). ``read_restricted``: not every reader may see it (Discourse's
    own flag: false only when the ``everyone`` group may read). ``name`` may be unknown (None)."""

    id: int
    name: str | None
    read_restricted: bool
    parent_id: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForumCategory:
        """A category in Discourse's category JSON (BasicCategorySerializer's fields)."""
        name = data.get("name")
        return cls(
            id=int(data["id"]),
            name=str(name) if isinstance(name, str) and name else None,
            read_restricted=bool(data.get("read_restricted", True)),
            parent_id=optional_int(data.get("parent_category_id")),
        )


@dataclass(frozen=True, slots=True)
class TagGroup:
    """A tag group (``/tag_groups.json``, TagGroupSerializer): its tags, and whether the ``everyone``
    group may see them (a permission for group 0, which Discourse also shows for a group with none)."""

    name: str
    tags: tuple[str, ...]
    everyone: bool

    @classmethod
    def all_from_json(cls, data: Mapping[str, Any]) -> tuple[TagGroup, ...]:
        """``GET /tag_groups.json``'s groups. Tags come as ``tags: [{name}]`` (current) or ``tag_names``
        (older); permissions are keyed by group id (current) or by group name (older); a group with
        none is shown as ``everyone: full`` by Discourse, and is read so here."""
        groups = []
        for item in data.get("tag_groups") or []:
            if not isinstance(item, Mapping):
                continue
            raw_tags = item.get("tags") or item.get("tag_names") or []
            names = [t.get("name") if isinstance(t, Mapping) else t for t in raw_tags]
            permissions = item.get("permissions")
            keys = {str(k) for k in permissions} if isinstance(permissions, Mapping) else set()
            groups.append(
                cls(
                    name=str(item.get("name") or ""),
                    tags=tuple(str(n) for n in names if n),
                    everyone=not keys or bool(keys & {"0", "everyone"}),
                )
            )
        return tuple(groups)
