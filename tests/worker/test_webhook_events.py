"""The webhook's permission and visibility events (issue 32): category, topic status,
reviewable and a PostMover notice reach the intake as ids, deduped by the signed body, the header only
choosing the body's shape. Bodies as Discourse sends them (worker/webhook_events.py names the sources)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis.asyncio as aredis_lib
from starlette.testclient import TestClient

from tests.conftest import make_settings
from tests.worker.webhook_support import SECRET, FakeIntake, encode, headers, post_payload
from worker.app.webhook import create_app
from worker.webhook_events import REVIEWABLE_RECHECK_S, WEBHOOK_PATH, family

pytestmark = pytest.mark.integration


@pytest.fixture
def intake() -> FakeIntake:
    return FakeIntake()


@pytest.fixture
def client(redis_url: str, intake: FakeIntake) -> Iterator[TestClient]:
    settings = make_settings(
        "postgresql://x@127.0.0.1/x",
        redis_url,
        discourse={"webhook_secret": SECRET, "bot_username": "citebot"},
    )
    with TestClient(create_app(settings, intake, aredis_lib.Redis.from_url(redis_url))) as c:
        yield c


def deliver(client: TestClient, payload: object, event: str, event_type: str) -> tuple[int, str]:
    body = encode(payload)
    response = client.post(WEBHOOK_PATH, content=body, headers=headers(body, event, event_type=event_type))
    return response.status_code, str(response.json()["outcome"])


def category(cid: int, restricted: bool) -> dict[str, object]:
    """WebHookCategorySerializer's body (the receiver reads the id only; the worker re-reads the rest)."""
    return {"category": {"id": cid, "name": "Staff", "slug": "staff", "read_restricted": restricted}}


def test_category_events_refresh_the_category(client: TestClient, intake: FakeIntake) -> None:
    for event, restricted in (("category_created", False), ("category_updated", True)):
        assert deliver(client, category(6, restricted), event, "category") == (200, "refresh")
    assert deliver(client, category(6, True), "category_updated", "category") == (200, "duplicate")
    assert deliver(client, {"category": {"id": 7}}, "category_destroyed", "category") == (200, "refresh")
    assert intake.categories == [(6, "category_created"), (6, "category_updated"), (7, "category_destroyed")]
    assert intake.posts == intake.topics == []


def test_topic_status_changes_refresh_the_topic(client: TestClient, intake: FakeIntake) -> None:
    events = ["topic_visible_status_updated", "topic_closed_status_updated", "topic_archived_status_updated"]
    for n, event in enumerate(events):
        topic = {"topic": {"id": 40 + n, "title": "t", "visible": n != 0}}
        assert deliver(client, topic, event, "topic") == (200, "refresh")
    assert intake.topics == [(40 + n, e) for n, e in enumerate(events)]


def test_a_flagged_post_is_read_at_once_and_again_after_the_hide(
    client: TestClient, intake: FakeIntake
) -> None:
    # ReviewableSerializer names a Post target "post_id"; PostActionCreator sends the event before hiding.
    flagged = {"reviewable": {"id": 9, "type": "ReviewableFlaggedPost", "status": 0, "post_id": 555,
                              "topic_id": 77, "target_url": "http://forum.test/t/x/77/3"}}  # fmt: skip
    assert deliver(client, flagged, "reviewable_created", "reviewable") == (200, "refresh")
    scored = {"reviewable": {**flagged["reviewable"], "score": 12.0}}
    assert deliver(client, scored, "reviewable_score_updated", "reviewable") == (200, "refresh")
    assert intake.posts == [(555, "reviewable"), (555, "reviewable")]
    assert intake.delayed == [(555, "reviewable", REVIEWABLE_RECHECK_S)] * 2
    queued = {"reviewable": {"id": 10, "type": "ReviewableQueuedPost", "status": 0, "topic_id": 77}}
    assert deliver(client, queued, "reviewable_created", "reviewable") == (200, "ignored")
    assert len(intake.posts) == 2


def test_the_notice_of_moved_posts_refreshes_its_topic(client: TestClient, intake: FakeIntake) -> None:
    # PostMover#create_moderator_post_in_original_topic: a small action (a whisper when moving to a PM).
    notice = post_payload(raw="", cooked="", post_type=3, action_code="split_topic", topic_id=88, id=8803)
    assert deliver(client, notice, "post_created", "post") == (200, "post_type")  # never a question
    assert intake.topics == [(88, "posts_moved")]
    assert intake.posts == [(8803, "post_created")]
    closed = post_payload(raw="", cooked="", post_type=3, action_code="closed.enabled", topic_id=89)
    deliver(client, closed, "post_created", "post")
    assert intake.topics == [(88, "posts_moved")]  # other small actions: the post only


def test_a_body_of_another_shape_than_its_header_is_refused(client: TestClient, intake: FakeIntake) -> None:
    """The header is not signed: it picks the body's shape, and a body that lacks it queues nothing."""
    assert deliver(client, category(6, True), "topic_edited", "topic")[0] == 400
    assert deliver(client, {"topic": {"id": 3}}, "category_updated", "category")[0] == 400
    assert deliver(client, {"topic": {"id": 3}}, "reviewable_created", "reviewable")[0] == 400
    assert intake.topics == intake.categories == intake.posts == []


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ("post_edited", "post"),
        ("topic_pinned_status_updated", "topic"),
        ("topic_visible_status_updated", "topic"),
        ("topic_created", None),  # never sent for moved posts; a new topic's post_created suffices
        ("category_destroyed", "category"),
        ("reviewable_transitioned_to", "reviewable"),
        ("topic__status_updated", None),
        ("topic_visible_status_updated\n", None),
        ("user_created", None),
        ("tag_updated", None),
    ],
)
def test_event_families(event: str, expected: str | None) -> None:
    assert family(event) == expected
