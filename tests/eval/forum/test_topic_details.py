"""``details.can_create_post`` of the forum double's topic JSON, which the summon policy reads
(worker/summon.py): app/serializers/topic_view_details_serializer.rb ``include_can_create_post?`` is
``scope.can_create?(Post, topic)``, and the attribute is left out, not false, when that is false;
lib/guardian/topic_guardian.rb ``can_create_post_on_topic?`` lets admins post anywhere, moderators and
trust level 4 in closed or archived topics, others in open ones only."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from eval.stack.forum.app import ForumApp
from tests.eval.forum.test_permissions import as_user, close
from tests.eval.forum.test_permissions import make as make  # the fixtures this file builds on
from tests.eval.forum.test_permissions import receiver as receiver
from tests.eval.forum.test_permissions import store as store

pytestmark = pytest.mark.integration


@pytest.fixture
def built(request: pytest.FixtureRequest) -> tuple[ForumApp, TestClient]:
    """The permissions suite's forum (its accounts: citebot admin, mod, tl4, alice …)."""
    forum: tuple[ForumApp, TestClient] = request.getfixturevalue("make")()
    return forum


def _details(http: TestClient, topic_id: int, who: str) -> dict[str, object]:
    body = http.get(f"/t/{topic_id}.json", headers=as_user(who)).json()
    details: dict[str, object] = body["details"]
    return details


def test_can_create_post_is_there_only_for_who_may_reply(built: tuple[ForumApp, TestClient]) -> None:
    _, http = built
    assert _details(http, 11, "alice").get("can_create_post") is True
    assert close(http, 11).status_code == 200
    assert "can_create_post" not in _details(http, 11, "alice")  # left out, not false
    assert _details(http, 11, "citebot").get("can_create_post") is True  # an admin may post anyway
    assert _details(http, 11, "tl4").get("can_create_post") is True
    assert close(http, 12, "archived").status_code == 200
    assert "can_create_post" not in _details(http, 12, "alice")
    assert _details(http, 12, "mod").get("can_create_post") is True
