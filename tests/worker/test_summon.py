"""The summon policy (worker/summon.py) over fakes: where the bot answers, who may summon it, and which
reads each decision costs.

Discourse behaviours it follows, by source file: lib/guardian/topic_guardian.rb (an admin may post in
closed and archived topics and sees every PM), lib/guardian/post_guardian.rb (an author may edit a
post of a closed, not archived, topic; a silenced member may still post in PMs it is part of),
app/serializers/topic_view_details_serializer.rb (``can_create_post`` present only when true; PM
``allowed_users`` leave out those allowed through ``allowed_groups``)."""

from __future__ import annotations

import pytest

from worker.domain import ForumPost, ForumTopic, Member
from worker.flags import SummonRules
from worker.members import MemberDirectory
from worker.settings import SummonSettings
from worker.summon import SummonPolicy, decide, decide_member, decide_topic
from worker.testing.forum import FakeForum

RULES = SummonRules()
TOPIC = ForumTopic(7, "Shadows flicker", "shadows-flicker", 1)
PM = ForumTopic(8, "A chat", "a-chat", None, archetype="private_message", allowed_users=("alice", "bob"))


def member(**fields: object) -> Member:
    groups = frozenset(str(g) for g in fields.pop("groups", ()))  # type: ignore[attr-defined]
    return Member(42, "alice", trust_level=int(fields.pop("trust_level", 1)), groups=groups, **fields)  # type: ignore[arg-type]


def where(topic: ForumTopic, *, answer_pms: bool = True, bot_groups: frozenset[str] = frozenset()) -> str:
    return decide_topic(
        topic, bot_username="citebot", answer_pms=answer_pms, bot_groups=lambda: bot_groups
    ).reason


# -- where --------------------------------------------------------------------------------------------


def test_a_public_open_topic_is_allowed() -> None:
    assert where(TOPIC) == "allowed"


def test_a_pm_the_bot_is_not_in_is_refused_even_with_pms_on() -> None:
    assert where(PM) == "pm_not_participant"
    assert where(PM, answer_pms=False) == "pm_disabled"


def test_a_pm_naming_the_bot_is_allowed_only_with_pms_on() -> None:
    with_bot = ForumTopic(
        8, "A chat", "a-chat", None, archetype="private_message", allowed_users=("alice", "CiteBot")
    )
    assert where(with_bot) == "allowed"
    assert where(with_bot, answer_pms=False) == "pm_disabled"


def test_a_group_pm_includes_the_bot_through_its_groups() -> None:
    group_pm = ForumTopic(9, "Help", "help", None, archetype="private_message", allowed_groups=("Support",))
    assert where(group_pm, bot_groups=frozenset({"support", "41"})) == "allowed"
    assert where(group_pm, bot_groups=frozenset({"staff"})) == "pm_not_participant"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"closed": True}, "topic_closed"),
        ({"archived": True}, "topic_archived"),
        ({"closed": True, "archived": True}, "topic_archived"),
        ({"can_reply": False}, "cannot_reply"),
    ],
)
def test_closed_archived_and_unrepliable_topics_are_refused(changes: dict[str, bool], reason: str) -> None:
    topic = ForumTopic(7, "t", "t", 1, **changes)  # type: ignore[arg-type]
    assert where(topic) == reason


def test_a_closed_pm_with_the_bot_is_refused_too() -> None:
    pm = ForumTopic(
        8, "A chat", "a-chat", None, archetype="private_message", allowed_users=("citebot",), closed=True
    )
    assert where(pm) == "topic_closed"


# -- who ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({}, "allowed"),
        ({"trust_level": 0}, "trust_level"),
        ({"silenced": True, "trust_level": 3}, "silenced"),
        ({"suspended": True, "trust_level": 3}, "suspended"),
        ({"staged": True}, "staged"),
        ({"admin": True, "trust_level": 0}, "allowed"),  # staff always may …
        ({"moderator": True, "silenced": True}, "silenced"),  # … but a penalty still counts
    ],
)
def test_who_may_summon_under_the_default_rules(fields: dict[str, object], reason: str) -> None:
    assert decide_member(member(**fields), RULES).reason == reason


def test_an_unreadable_account_is_refused() -> None:
    decision = decide_member(None, RULES)
    assert decision.reason == "member_unverifiable"
    assert not decision.may_notify  # the deployment's fault, not the member's


def test_allowed_groups_by_id_or_name_and_the_trust_level_both_apply() -> None:
    rules = SummonRules(allowed_groups=("41", "moderators_club"), min_trust_level=2)
    assert decide_member(member(trust_level=2, groups={"41", "support"}), rules).allowed
    assert decide_member(member(trust_level=2, groups={"moderators_club"}), rules).allowed
    assert decide_member(member(trust_level=3, groups={"12", "trust_level_2"}), rules).reason == "group"
    assert decide_member(member(trust_level=1, groups={"41"}), rules).reason == "trust_level"
    assert decide_member(member(moderator=True), rules).allowed


def test_only_member_refusals_may_carry_a_notice() -> None:
    closed = decide(
        ForumTopic(7, "t", "t", 1, closed=True),
        member(trust_level=0),
        RULES,
        bot_username="citebot",
        answer_pms=True,
    )
    assert closed.reason == "topic_closed"  # the place is decided first
    assert not closed.may_notify
    newcomer = decide(TOPIC, member(trust_level=0), RULES, bot_username="citebot", answer_pms=True)
    assert newcomer.may_notify
    assert newcomer.rule_id == "summon.trust_level"


# -- the reads a decision costs ----------------------------------------------------------------------


def policy(forum: FakeForum, *, answer_pms: bool = True, **settings: object) -> SummonPolicy:
    directory = MemberDirectory(forum, SummonSettings.model_validate(settings))
    return SummonPolicy(directory, bot_username="citebot", answer_pms=answer_pms)


def forum_with_post() -> tuple[FakeForum, ForumPost]:
    forum = FakeForum()
    forum.add_topic(7, "Shadows flicker", "shadows-flicker")
    return forum, forum.add_post(
        70, 7, 2, "@citebot why do my shadows flicker?", username="alice", user_id=42
    )


def test_a_refused_place_costs_no_member_read() -> None:
    forum, post = forum_with_post()
    decision = policy(forum).check(post, forum.set_topic(7, closed=True), RULES)
    assert decision.reason == "topic_closed"
    assert forum.user_reads == []


def test_one_member_read_a_minute_per_author() -> None:
    forum, post = forum_with_post()
    checker = policy(forum)
    for _ in range(3):
        assert checker.check(post, forum.topics[7], RULES).allowed
    assert forum.user_reads == [42]


def test_the_bots_groups_are_read_only_for_a_group_pm_that_does_not_name_it() -> None:
    forum, post = forum_with_post()
    forum.set_member(-5, "citebot", admin=True, trust_level=4, groups={"support"})
    checker = policy(forum)
    named = forum.set_topic(7, archetype="private_message", allowed_users=("alice", "citebot"))
    assert checker.check(post, named, RULES).allowed
    assert forum.user_reads == [42]
    group_pm = forum.set_topic(
        7, archetype="private_message", allowed_users=("alice",), allowed_groups=("Support",)
    )
    assert checker.check(post, group_pm, RULES).allowed
    assert forum.user_reads == [42, "citebot"]


def test_a_bot_without_staff_rights_fails_closed_unless_the_fallback_is_on() -> None:
    forum, post = forum_with_post()
    forum.bot_is_staff = False
    assert policy(forum).check(post, forum.topics[7], RULES).reason == "member_unverifiable"
    fallback = policy(forum, public_profile_fallback=True).check(post, forum.topics[7], RULES)
    assert fallback.allowed
    forum.set_member(42, "alice", trust_level=0)
    assert (
        policy(forum, public_profile_fallback=True).check(post, forum.topics[7], RULES).reason
        == "trust_level"
    )


def test_a_deleted_account_cannot_be_verified() -> None:
    forum, post = forum_with_post()
    del forum.members[42]
    assert policy(forum).check(post, forum.topics[7], RULES).reason == "member_unverifiable"
