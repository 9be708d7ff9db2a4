"""Who may summon the bot, and where: the answer path's policy step (issue 32).

It runs after the post is loaded and before anything reads the question's text, so a refused question
never reaches the gate, the embedder, search or the LLM. A refusal is a return value
(``SummonDecision``), recorded on the ``answers`` row as state ``denied`` with ``rule_id``
``summon.<reason>``.

Where (``decide_topic``, from the topic JSON as the bot sees it; Discourse's source in brackets):

- a private message is answered only when PMs are on (``CITEBOT_DISCOURSE__ANSWER_PMS``) and the bot is
  a participant: named in ``details.allowed_users`` or a member of a group in ``details.allowed_groups``
  (TopicViewDetailsSerializer lists a user allowed through a group under the group only). An admin bot
  can read and post in every PM (TopicGuardian#can_see_topic? ``return true if is_admin?``), and every
  PM post reaches post webhooks, so without this check any PM between two members would be a question;
  a mention there notifies participants only (PostAlerter), so the bot was never asked. With PMs off,
  a PM the bot is in reaches the worker through the poller (the webhook's ``topic_archetype`` names no
  participant; the bot's ``private_message`` notification does, PostAlerter#notify_pm_users): it is
  refused ``pm_disabled`` and is the one refused place that may get the notice, since the member wrote
  to the bot;
- an archived or a closed topic gets no answer: an author may still edit a post of a closed topic
  (PostGuardian#can_edit_post? refuses archived topics only) and an admin bot may post in both
  (TopicGuardian#can_create_post_on_topic? ``return true if is_admin?``), which would revive a topic
  moderators closed;
- a topic where the bot may not reply gets none (``details.can_create_post``, present only when true:
  TopicViewDetailsSerializer#include_can_create_post?).

Who (``decide_member``, from ``worker.members``): never a suspended, silenced or staged account (a
silenced member may still post in PMs it is part of: PostGuardian#can_create_post_in_topic?); staff
(admin, moderator) always; everyone else needs ``citebot_min_trust_level`` and, when
``citebot_allowed_groups`` names any, one of those groups (``worker.flags.SummonRules``).

The topic is decided first: a refused topic costs no member read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from worker.domain import ForumPost, ForumTopic, Member
from worker.flags import SummonRules
from worker.members import MemberDirectory

Reason = Literal[
    "allowed",
    "pm_disabled",
    "pm_not_participant",
    "topic_archived",
    "topic_closed",
    "cannot_reply",
    "member_unverifiable",
    "suspended",
    "silenced",
    "staged",
    "trust_level",
    "group",
]
RULE_PREFIX = "summon."
# Refusals about where the question was asked: the bot posts nothing there, not even a notice.
TOPIC_REASONS: frozenset[Reason] = frozenset(
    {"pm_disabled", "pm_not_participant", "topic_archived", "topic_closed", "cannot_reply"}
)
# ... nor when the fault is the deployment's (a bot account that cannot read members), not the member's.
SILENT_REASONS: frozenset[Reason] = TOPIC_REASONS | {"member_unverifiable"}
NOTICE = {
    "en": "Sorry, I can only answer questions from some members of this forum.",
    "fr": "Désolé, je ne peux répondre qu'aux questions de certains membres de ce forum.",
}
# The short notices of ``citebot_refusal_notice`` (``short``), one per kind of "no"; none names a rule.
NoticeKind = Literal["member", "pm", "limit", "disabled"]
NOTICES: dict[NoticeKind, dict[str, str]] = {
    "member": NOTICE,
    "pm": {
        "en": "Sorry, I do not answer private messages. Please ask in a topic of the forum.",
        "fr": "Désolé, je ne réponds pas aux messages privés. Posez la question dans un sujet du forum.",
    },
    "limit": {
        "en": "Sorry, you have asked me many questions in the last hour. Please try again later.",
        "fr": "Désolé, vous m'avez posé beaucoup de questions dans l'heure. Réessayez plus tard.",
    },
    "disabled": {
        "en": "Sorry, I am not answering questions at the moment.",
        "fr": "Désolé, je ne réponds pas aux questions pour le moment.",
    },
}
if set(NOTICES) != set(get_args(NoticeKind)):
    raise RuntimeError("worker.summon: a notice kind without its text")


def notice_text(kind: NoticeKind, language: str) -> str:
    """The notice of ``kind`` in ``language`` (English when there is none in it)."""
    texts = NOTICES[kind]
    return texts.get(language, texts["en"])


@dataclass(frozen=True, slots=True)
class SummonDecision:
    """Whether the question may be answered; ``reason`` is a short code, ``detail`` says it for logs and
    the ``answers`` row (never forum text)."""

    allowed: bool
    reason: Reason
    detail: str = ""
    participant: bool = False  # ``pm_disabled``: the bot is in the PM (the member wrote to it)

    @property
    def rule_id(self) -> str:
        return RULE_PREFIX + self.reason

    @property
    def may_notify(self) -> bool:
        """A refused member may be told (per ``citebot_refusal_notice``); a refused place never is, nor a
        member refused because the bot could not read the account. The one refused place that may be told
        is a PM the bot is in while PMs are off."""
        if self.allowed:
            return False
        if self.reason == "pm_disabled":
            return self.participant
        return self.reason not in SILENT_REASONS

    def trace(self) -> dict[str, object]:
        out: dict[str, object] = {"allowed": self.allowed, "reason": self.reason, "detail": self.detail}
        if self.reason == "pm_disabled":
            out["participant"] = self.participant
        return out


ALLOWED = SummonDecision(True, "allowed")


def is_participant(topic: ForumTopic, bot_username: str, bot_groups: frozenset[str]) -> bool:
    """Is the bot one of a PM's participants, by name or through one of its groups?"""
    if bot_username.lower() in {u.lower() for u in topic.allowed_users}:
        return True
    return bool({g.lower() for g in topic.allowed_groups} & bot_groups)


def decide_topic(
    topic: ForumTopic,
    *,
    bot_username: str,
    answer_pms: bool,
    bot_groups: Callable[[], frozenset[str]] = frozenset,
) -> SummonDecision:
    """May the bot answer in this topic? ``bot_groups`` is called only for a group PM that does not name
    the bot (it may cost a read)."""
    if topic.private_message:
        named = is_participant(topic, bot_username, frozenset())
        member = named or bool(topic.allowed_groups and is_participant(topic, bot_username, bot_groups()))
        if not answer_pms:
            return SummonDecision(False, "pm_disabled", "private messages are not answered", member)
        if not member:
            return SummonDecision(False, "pm_not_participant", "the bot is not in this private message")
    if topic.archived:
        return SummonDecision(False, "topic_archived", "the topic is archived")
    if topic.closed:
        return SummonDecision(False, "topic_closed", "the topic is closed")
    if not topic.can_reply:
        return SummonDecision(False, "cannot_reply", "the bot may not reply in this topic")
    return ALLOWED


def decide_member(member: Member | None, rules: SummonRules) -> SummonDecision:
    """May this account summon the bot under ``rules``?"""
    if member is None:
        return SummonDecision(False, "member_unverifiable", "the author's account could not be read")
    if member.suspended:
        return SummonDecision(False, "suspended", "the author is suspended")
    if member.silenced:
        return SummonDecision(False, "silenced", "the author is silenced")
    if member.staged:
        return SummonDecision(False, "staged", "the author is a staged account")
    if member.staff:
        return ALLOWED
    if member.trust_level < rules.min_trust_level:
        return SummonDecision(
            False, "trust_level", f"trust level {member.trust_level} < {rules.min_trust_level}"
        )
    if rules.allowed_groups and not set(rules.allowed_groups) & member.groups:
        return SummonDecision(False, "group", "the author is in none of citebot_allowed_groups")
    return ALLOWED


def decide(
    topic: ForumTopic,
    member: Member | None,
    rules: SummonRules,
    *,
    bot_username: str,
    answer_pms: bool,
    bot_groups: frozenset[str] = frozenset(),
) -> SummonDecision:
    """The whole decision from the topic and the author's account (the topic first)."""
    where = decide_topic(
        topic, bot_username=bot_username, answer_pms=answer_pms, bot_groups=lambda: bot_groups
    )
    return where if not where.allowed else decide_member(member, rules)


class SummonPolicy:
    """``decide`` with the reads it needs, made only when needed: the author's account once the topic
    passes, the bot's groups only for a group PM that does not name it."""

    def __init__(self, members: MemberDirectory, *, bot_username: str, answer_pms: bool) -> None:
        self.members = members
        self.bot_username = bot_username
        self.answer_pms = answer_pms

    def check(self, post: ForumPost, topic: ForumTopic, rules: SummonRules) -> SummonDecision:
        """The decision for ``post`` (asked in ``topic``) under ``rules``."""
        where = decide_topic(
            topic, bot_username=self.bot_username, answer_pms=self.answer_pms, bot_groups=self._bot_groups
        )
        if not where.allowed:
            return where
        return decide_member(self.members.member(post.user_id, post.username), rules)

    def _bot_groups(self) -> frozenset[str]:
        bot = self.members.bot(self.bot_username)
        return bot.groups if bot is not None else frozenset()
