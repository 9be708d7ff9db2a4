"""Who may see and do what on the local forum: Discourse's ``Guardian``, rule for rule.

Each method names the Discourse source it follows (``lib/guardian.rb``, ``lib/guardian/*.rb``,
``app/models/*.rb``); ``tests/eval/forum/test_permissions.py`` pins the behaviour to those files. The
Guardian is pure: it reads the acting user, the categories and the site's policy, never the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Group::AUTO_GROUPS (app/models/group.rb): the automatic groups and their fixed ids.
AUTO_GROUPS: dict[str, int] = {
    "everyone": 0,
    "admins": 1,
    "moderators": 2,
    "staff": 3,
    "trust_level_0": 10,
    "trust_level_1": 11,
    "trust_level_2": 12,
    "trust_level_3": 13,
    "trust_level_4": 14,
}
# CategoryGroup.permission_types (app/models/category_group.rb)
FULL, CREATE_POST, READONLY = 1, 2, 3
# Post.types (app/models/post.rb)
REGULAR, MODERATOR_ACTION, SMALL_ACTION, WHISPER = 1, 2, 3, 4
PRIVATE_MESSAGE = "private_message"
TL4 = 4

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class User:
    """A forum account with what Guardian reads of it (``app/models/user.rb``, ``concerns/roleable.rb``)."""

    id: int
    username: str
    admin: bool
    moderator: bool = False
    trust_level: int = 1
    groups: tuple[str, ...] = ()  # custom groups; the automatic ones follow from the fields above
    silenced_till: datetime | None = None
    suspended_till: datetime | None = None
    staged: bool = False
    anonymized: bool = False
    sidebar_category_ids: tuple[int, ...] | None = None  # None: the site's default sidebar

    @property
    def staff(self) -> bool:
        """``Roleable#staff?``: admin or moderator."""
        return self.admin or self.moderator

    def silenced(self, now: datetime | None = None) -> bool:
        """``User#silenced?``: ``silenced_till`` is in the future."""
        return self.silenced_till is not None and self.silenced_till > (now or datetime.now(UTC))

    def suspended(self, now: datetime | None = None) -> bool:
        """``User#suspended?``: ``suspended_till`` is in the future."""
        return self.suspended_till is not None and self.suspended_till > (now or datetime.now(UTC))

    def group_names(self) -> frozenset[str]:
        """Every group the user is in: the custom ones and the automatic ones Discourse keeps
        (``Group.refresh_automatic_groups!``: admins, moderators, staff, trust_level_0..N)."""
        names = {g.lower() for g in self.groups}
        if self.admin:
            names.add("admins")
        if self.moderator:
            names.add("moderators")
        if self.staff:
            names.add("staff")
        names.update(f"trust_level_{n}" for n in range(0, min(self.trust_level, TL4) + 1))
        return frozenset(names)


@dataclass(frozen=True, slots=True)
class Category:
    """A category row (``app/models/category.rb``): ``permissions`` maps group names to permission types;
    an empty map on a public category means everyone/full, as ``Category.resolve_permissions`` stores it."""

    id: int
    name: str
    slug: str
    parent_category_id: int | None = None
    read_restricted: bool = False
    permissions: Mapping[str, int] = field(default_factory=dict)
    description: str | None = None
    color: str = "0088CC"
    text_color: str = "FFFFFF"
    position: int = 0

    def group_permissions(self) -> list[dict[str, Any]]:
        """``CategorySerializer#group_permissions``: everyone/full when a public category keeps none."""
        perms = [{"permission_type": p, "group_name": g} for g, p in sorted(self.permissions.items())]
        if not perms and not self.read_restricted:
            perms.append({"permission_type": FULL, "group_name": "everyone"})
        return perms


def resolve_permissions(permissions: Mapping[str, Any]) -> tuple[bool, dict[str, int]]:
    """``Category.resolve_permissions``: (read_restricted, group → type). everyone/full makes the category
    public with no rows; everyone with a lesser type makes it public and keeps the rows."""
    mapped = {str(g).lower(): _permission_type(p) for g, p in permissions.items()}
    if mapped.get("everyone") == FULL:
        return False, {}
    return "everyone" not in mapped, mapped


def _permission_type(value: Any) -> int:
    names = {"full": FULL, "create_post": CREATE_POST, "readonly": READONLY}
    if isinstance(value, str) and value.lower() in names:
        return names[value.lower()]
    return int(value)


@dataclass(frozen=True, slots=True)
class Policy:
    """The site settings Guardian reads. Defaults: whispers on for the staff group; hidden posts shown to
    staff and their authors only; no staff-only tags."""

    whispers_allowed_groups: tuple[str, ...] = ("staff",)
    hidden_post_visible_groups: tuple[str, ...] = ()
    staff_only_tags: tuple[str, ...] = ()


class Guardian:
    """``lib/guardian.rb`` for one acting user (``None`` is anonymous, ``Guardian::AnonymousUser``)."""

    def __init__(
        self,
        user: User | None,
        categories: Mapping[int, Category],
        policy: Policy | None = None,
        *,
        now: datetime | None = None,
    ) -> None:
        self.user = user
        self.categories = categories
        self.policy = policy or Policy()
        self.now = now or datetime.now(UTC)
        self._groups = user.group_names() if user else frozenset()

    # -- the user (lib/guardian.rb) --------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    @property
    def is_admin(self) -> bool:
        return self.user is not None and self.user.admin

    @property
    def is_moderator(self) -> bool:
        return self.user is not None and self.user.moderator

    @property
    def is_staff(self) -> bool:
        return self.user is not None and self.user.staff

    @property
    def is_silenced(self) -> bool:
        return self.user is not None and self.user.silenced(self.now)

    @property
    def is_suspended(self) -> bool:
        return self.user is not None and self.user.suspended(self.now)

    def has_trust_level(self, level: int) -> bool:
        """``User#has_trust_level?``: staff count as every level."""
        return self.user is not None and (self.user.staff or self.user.trust_level >= level)

    def in_any_groups(self, names: Iterable[str]) -> bool:
        """``User#in_any_groups?`` (the everyone group holds every user, anonymous included only where the
        caller checks it first, as Discourse does)."""
        wanted = {n.lower() for n in names}
        return bool(self.user) and ("everyone" in wanted or bool(wanted & self._groups))

    @property
    def whisperer(self) -> bool:
        """``Roleable#whisperer?``: no one while ``whispers_allowed_groups`` is empty, else admins and the
        members of those groups."""
        allowed = self.policy.whispers_allowed_groups
        if not allowed or self.user is None:
            return False
        return self.user.admin or self.in_any_groups(allowed)

    # -- categories (lib/guardian/category_guardian.rb, app/models/user.rb) -----------------------

    def secure_category_ids(self) -> frozenset[int]:
        """``User#secure_category_ids``: every read-restricted category for an admin, else those whose
        permissions name one of the user's groups."""
        restricted = [c for c in self.categories.values() if c.read_restricted]
        if self.is_admin:
            return frozenset(c.id for c in restricted)
        return frozenset(c.id for c in restricted if any(g in self._groups for g in c.permissions))

    def can_see_category(self, category_id: int | None) -> bool:
        """``CategoryGuardian#can_see_category?``: admins see all; a public category is seen by everyone; a
        read-restricted one by the members of its groups. A topic without a category is uncategorized
        (public); a category the forum does not have is treated as restricted (fail closed)."""
        if category_id is None or self.is_admin:
            return True
        category = self.categories.get(int(category_id))
        if category is None:
            return False
        if not category.read_restricted:
            return True
        return category.id in self.secure_category_ids()

    def allowed_category_ids(self) -> frozenset[int]:
        """``CategoryGuardian#allowed_category_ids``."""
        return frozenset(c.id for c in self.categories.values() if self.can_see_category(c.id))

    def can_post_in_category(self, category_id: int | None) -> bool:
        """``Category.post_create_allowed`` (``scoped_to_permissions``): admins anywhere; others where the
        everyone group or one of their groups has full or create_post."""
        if category_id is None or self.is_admin:
            return True
        category = self.categories.get(int(category_id))
        if category is None:
            return False
        if not category.read_restricted and not category.permissions:
            return True
        return (
            any(
                p in (FULL, CREATE_POST) and (g == "everyone" or g in self._groups)
                for g, p in category.permissions.items()
            )
            and self.authenticated
        )

    def can_create_category(self) -> bool:
        """``CategoryGuardian#can_create_category?`` (admins; moderators only with a setting left off)."""
        return self.is_admin

    def can_edit_category(self) -> bool:
        """``CategoryGuardian#can_edit_category?``."""
        return self.is_admin

    def site_categories(self, *, lazy: bool, sidebar_ids: Sequence[int]) -> list[Category]:
        """``Site#categories``: the categories the caller may see (``can_see_serialized_category?``); with
        ``lazy_load_categories`` only the caller's sidebar categories and their ancestors (none for an
        anonymous caller); a subcategory whose parent is left out is dropped."""
        keep: set[int] | None = None
        if lazy:
            keep = set()
            if self.authenticated:
                seen = {c for c in sidebar_ids if self.can_see_category(c)}
                keep |= seen
                for cid in seen:
                    parent = self.categories.get(cid)
                    while parent is not None and parent.parent_category_id is not None:
                        keep.add(parent.parent_category_id)
                        parent = self.categories.get(parent.parent_category_id)
        chosen = [
            c
            for c in sorted(self.categories.values(), key=lambda c: (c.position, c.id))
            if (keep is None or c.id in keep) and self.can_see_category(c.id)
        ]
        ids = {c.id for c in chosen}
        return [c for c in chosen if c.parent_category_id is None or c.parent_category_id in ids]

    # -- topics (lib/guardian/topic_guardian.rb) --------------------------------------------------

    def can_see_deleted_topics(self) -> bool:
        return self.is_staff

    def can_see_topic(self, topic: Row, *, hide_deleted: bool = True) -> bool:
        """``TopicGuardian#can_see_topic?``: admins see every topic; a deleted one only staff; a PM its
        participants; any other the users who can see its category. Unlisted (``visible = false``)
        topics are seen by direct link like any other."""
        if self.is_admin:
            return True
        if hide_deleted and topic["deleted_at"] is not None and not self.can_see_deleted_topics():
            return False
        if topic["archetype"] == PRIVATE_MESSAGE:
            return self.user is not None and self.user.id in (topic["allowed_user_ids"] or [])
        return self.can_see_category(topic["category_id"])

    def can_moderate_topic(self, topic: Row | None) -> bool:
        """``TopicGuardian#can_moderate_topic?`` / ``can_perform_action_available_to_group_moderators?``
        (category group moderation is not modelled): staff, or trust level 4."""
        if self.user is None or topic is None:
            return False
        return self.is_staff or self.user.trust_level >= TL4

    def can_close_topic(self, topic: Row | None) -> bool:
        """``can_close_topic?`` and ``can_archive_topic?``: aliases of
        ``can_perform_action_available_to_group_moderators?``."""
        return self.can_moderate_topic(topic)

    def can_toggle_topic_visibility(self, topic: Row | None) -> bool:
        """``can_toggle_topic_visibility?`` → ``Guardian#can_moderate?``: not silenced; staff, or trust
        level 4 on a topic they can see."""
        if topic is None or self.user is None or self.is_silenced:
            return False
        return self.is_staff or (self.user.trust_level >= TL4 and self.can_see_topic(topic))

    def can_move_posts(self, topic: Row | None) -> bool:
        """``TopicGuardian#can_move_posts?``: not silenced, a group-moderator action, PMs staff only."""
        if topic is None or self.is_silenced or not self.can_moderate_topic(topic):
            return False
        return topic["archetype"] != PRIVATE_MESSAGE or self.is_staff

    def can_create_post(self, topic: Row | None) -> bool:
        """``PostGuardian#can_create_post_in_topic``: a silenced user (``SpamRule::AutoSilence
        .prevent_posting?``) may post only in a PM that lists them; the category must allow posting."""
        if self.user is None:
            return False
        if self.is_silenced and not (
            topic is not None
            and topic["archetype"] == PRIVATE_MESSAGE
            and self.user.id in (topic["allowed_user_ids"] or [])
        ):
            return False
        if topic is None or topic["archetype"] == PRIVATE_MESSAGE:
            return True
        return self.can_post_in_category(topic["category_id"])

    def can_create_post_on_topic(self, topic: Row | None) -> bool:
        """``Guardian#can_create?(Post, topic)``: the topic must be visible to the user
        (``can_see?(parent)``), then ``TopicGuardian#can_create_post_on_topic?``: never on a deleted
        topic; admins anywhere; moderators and trust level 4 also in closed or archived topics."""
        if self.user is None or topic is None or not self.can_see_topic(topic):
            return False
        if topic["deleted_at"] is not None:
            return False
        if self.is_admin:
            return True
        trusted = self.user.trust_level >= TL4 or self.is_moderator
        return (not (topic["closed"] or topic["archived"]) or trusted) and self.can_create_post(topic)

    def can_create_topic_on_category(self, category_id: int | None) -> bool:
        """``TopicGuardian#can_create_topic_on_category?`` (create_topic_allowed_groups not modelled)."""
        if self.user is None:
            return False
        if self.is_staff:
            return True
        return self.can_create_post(None) and self.can_post_in_category(category_id)

    def can_create_whisper(self) -> bool:
        """``TopicGuardian#can_create_whisper?``: whisperers."""
        return self.whisperer

    def visible_tags(self, tags: Iterable[str]) -> list[str]:
        """``topic.tags.visible(guardian)`` / ``DiscourseTagging.hidden_tag_names``: tags of a staff-only
        tag group are shown to staff only."""
        hidden = set() if self.is_staff else {t.lower() for t in self.policy.staff_only_tags}
        return [t for t in tags if t.lower() not in hidden]

    # -- posts (lib/guardian/post_guardian.rb, app/models/topic.rb) -------------------------------

    def visible_post_types(self) -> tuple[int, ...]:
        """``Topic.visible_post_types``: regular, moderator action, small action; whispers for whisperers."""
        types = (REGULAR, MODERATOR_ACTION, SMALL_ACTION)
        return (*types, WHISPER) if self.whisperer else types

    def can_see_post(self, post: Row, topic: Row) -> bool:
        """``PostGuardian#can_see_post?``: admins always; else the topic must be visible, the post of a
        visible type (or the user's own), and unless a moderator: not deleted (staff only) and not hidden
        unless ``can_see_hidden_post?``."""
        if self.is_admin:
            return True
        if not self.can_see_topic(topic):
            return False
        mine = self.user is not None and self.user.id == post["user_id"]
        if not mine and post["post_type"] not in self.visible_post_types():
            return False
        if self.is_moderator:
            return True
        if post["deleted_at"] is not None and not self.is_staff:
            return False
        return not post["hidden"] or self.can_see_hidden_post(post)

    def can_see_hidden_post(self, post: Row) -> bool:
        """``PostGuardian#can_see_hidden_post?``: the everyone group in ``hidden_post_visible_groups``,
        else staff, the author and those groups' members; never anonymous."""
        groups = self.policy.hidden_post_visible_groups
        if "everyone" in groups:
            return True
        if self.user is None:
            return False
        return self.is_staff or post["user_id"] == self.user.id or self.in_any_groups(groups)

    def cooked_hidden(self, post: Row) -> bool:
        """``BasicPostSerializer#cooked_hidden``: a hidden post's cooked text is withheld from non-staff."""
        return bool(post["hidden"]) and not self.is_staff

    def include_raw(self, post: Row) -> bool:
        """``PostSerializer#include_raw?``: raw of a hidden post only to staff and its author."""
        if not post["hidden"] or self.is_staff:
            return True
        return self.user is not None and self.user.id == post["user_id"]

    def can_edit_post(self, post: Row, topic: Row) -> bool:
        """``PostGuardian#can_edit_post?``: admins always; staff where they may post
        (``can_create_post?``, closed topics included); authors unless the topic is archived, the post
        deleted, or they are silenced (a hidden post after its cooldown, not modelled)."""
        if self.user is None:
            return False
        if self.is_admin:
            return True
        if self.is_staff:
            return self.can_create_post(topic)
        if topic["archived"] or post["user_deleted"] or post["deleted_at"] is not None:
            return False
        return post["user_id"] == self.user.id and not self.is_silenced

    def can_unhide(self, post: Row) -> bool:
        """``PostGuardian#can_unhide?``: a hidden post, by staff."""
        return bool(post["hidden"]) and self.is_staff

    # -- users (lib/guardian/user_guardian.rb) ----------------------------------------------------

    def can_anonymize_user(self, target: User | None) -> bool:
        """``UserGuardian#can_anonymize_user?``: staff, of a non-staff user not anonymized yet."""
        return self.is_staff and target is not None and not target.staff and not target.anonymized
