"""The pipeline's summon step (worker/summon.py) over real PostgreSQL with the in-memory forum: a
refused question ends ``denied`` with its reason, and nothing of it reaches the gate, the embedder,
search or the LLM; the refusal notice, when on, is posted once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.worker.test_pipeline import World, build_world
from worker.summon import NOTICE
from worker.testing.chat import FakeChatModel

pytestmark = pytest.mark.integration

MEMBER = 7  # World.ask's author ("member")


@pytest.fixture
def world(db_url: str, redis_url: str) -> Iterator[World]:
    yield from build_world(db_url, redis_url, FakeChatModel(default="Raise the shadow bias [[1]]."))


@pytest.fixture
def pm_world(db_url: str, redis_url: str) -> Iterator[World]:
    yield from build_world(
        db_url,
        redis_url,
        FakeChatModel(default="Raise the shadow bias [[1]]."),
        discourse={"answer_pms": True},
    )


def _stages(world: World, post_id: int) -> list[str]:
    return [s["name"] for s in world.row(post_id).trace["stages"]]


def _untouched(world: World, post_id: int) -> None:
    """Nothing of the question went past the summon step: no gate, embedding, search, prompt or LLM."""
    assert isinstance(world.chat, FakeChatModel)
    assert world.chat.calls == 0
    assert _stages(world, post_id) == ["load", "summon"]


def _pm(world: World, *participants: str) -> None:
    world.forum.add_topic(50, "Between two members", "between-two-members", None)
    world.forum.set_topic(50, archetype="private_message", allowed_users=participants)


def test_a_pm_between_two_members_is_not_a_question_even_with_pms_on(pm_world: World) -> None:
    _pm(pm_world, "member", "bob")
    pm_world.ask(910, 50, "how do I stop shadow flicker with the shadow bias? (private)")
    outcome = pm_world.pipeline.run(910)
    assert outcome.state == "denied"
    row = pm_world.row(910)
    assert row.rule_id == "summon.pm_not_participant"
    assert pm_world.forum.created == []
    assert pm_world.forum.user_reads == []  # the place was refused first: no member read
    _untouched(pm_world, 910)


def test_a_mention_in_a_pm_is_not_answered_with_pms_off(world: World) -> None:
    _pm(world, "member", "citebot")
    world.ask(911, 50, "@citebot how do I stop shadow flicker with the shadow bias?")
    assert world.pipeline.run(911).state == "denied"
    assert world.row(911).rule_id == "summon.pm_disabled"
    assert world.forum.created == []
    _untouched(world, 911)


def test_a_pm_the_bot_is_in_is_answered_with_pms_on(pm_world: World) -> None:
    _pm(pm_world, "member", "citebot")
    pm_world.ask(912, 50, "how do I stop shadow flicker with the shadow bias?")
    assert pm_world.pipeline.run(912).state == "posted"
    assert [p.topic_id for p in pm_world.forum.created] == [50]


@pytest.mark.parametrize(
    ("changes", "reason"), [({"closed": True}, "closed"), ({"archived": True}, "archived")]
)
def test_closed_and_archived_topics_get_no_answer(world: World, changes: dict[str, Any], reason: str) -> None:
    world.forum.set_topic(1, **changes)
    world.ask(913, 1, "@citebot how do I stop shadow flicker with the shadow bias?")
    assert world.pipeline.run(913).state == "denied"
    row = world.row(913)
    assert row.rule_id == f"summon.topic_{reason}"
    assert row.error == f"the topic is {reason}"
    assert world.forum.created == []
    _untouched(world, 913)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"trust_level": 0}, "trust_level"),
        ({"trust_level": 2, "silenced": True}, "silenced"),
        ({"trust_level": 2, "suspended": True}, "suspended"),
        ({"trust_level": 1, "staged": True}, "staged"),
    ],
)
def test_who_may_not_summon_gets_nothing_by_default(
    world: World, fields: dict[str, Any], reason: str
) -> None:
    world.forum.set_member(MEMBER, "member", **fields)
    world.ask(914, 1, "@citebot how do I stop shadow flicker with the shadow bias?")
    assert world.pipeline.run(914).state == "denied"
    assert world.row(914).rule_id == f"summon.{reason}"
    assert world.forum.created == []
    _untouched(world, 914)


def test_the_short_notice_is_posted_once_in_the_members_language(world: World) -> None:
    world.forum.settings["citebot_refusal_notice"] = "short"
    world.forum.set_member(MEMBER, "member", trust_level=0)
    world.ask(915, 1, "@citebot comment éviter le scintillement des ombres avec le biais ?")
    outcome = world.pipeline.run(915)
    assert outcome.state == "denied"
    assert [p.raw for p in world.forum.created] == [NOTICE["fr"]]
    row = world.row(915)
    assert (row.rule_id, row.reply_post_id) == ("summon.trust_level", world.forum.created[0].id)
    assert world.pipeline.run(915).state == "denied"  # a redelivery posts nothing more
    assert len(world.forum.created) == 1
    assert isinstance(world.chat, FakeChatModel)
    assert world.chat.calls == 0


def test_no_notice_where_the_place_was_refused(world: World) -> None:
    world.forum.settings["citebot_refusal_notice"] = "short"
    world.forum.set_topic(1, closed=True)
    world.ask(916, 1, "@citebot how do I stop shadow flicker with the shadow bias?")
    assert world.pipeline.run(916).state == "denied"
    assert world.forum.created == []


def test_allowed_groups_from_the_site_setting(world: World) -> None:
    world.forum.settings["citebot_allowed_groups"] = "41"
    world.ask(917, 1, "@citebot how do I stop shadow flicker with the shadow bias?")
    assert world.pipeline.run(917).state == "denied"
    assert world.row(917).rule_id == "summon.group"
    world.forum.set_member(8, "helper", trust_level=1, groups={"41", "support"})
    world.ask(918, 1, "@citebot how do I stop shadow flicker with the shadow bias?", post_number=4)
    world.forum.edit_post(918, username="helper", user_id=8)
    assert world.pipeline.run(918).state == "posted"
