"""The reads the summon policy needs (issue 32), over respx with JSON shaped like Discourse's:
``GET /admin/users/{id}.json`` (app/controllers/admin/users_controller.rb #show renders
app/serializers/admin_detailed_user_serializer.rb without a root), ``GET /u/{username}.json``
(users_controller.rb #show, app/serializers/user_serializer.rb under ``user``) and the topic fields of
``GET /t/{id}.json`` (app/serializers/topic_view_serializer.rb, topic_view_details_serializer.rb)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
import respx

from worker.clients.discourse import DiscourseClient
from worker.domain import Member
from worker.errors import AuthError, NotFoundError
from worker.settings import DiscourseSettings

BASE = "http://forum.test"
NOW = datetime(2025, 6, 1, tzinfo=UTC)


@pytest.fixture
def client() -> DiscourseClient:
    settings = DiscourseSettings(base_url=BASE, api_key="k-123", api_username="citebot")  # type: ignore[arg-type, call-arg]
    return DiscourseClient(httpx.Client(), settings)


def admin_user_json(**extra: object) -> dict[str, object]:
    """AdminDetailedUserSerializer < AdminUserSerializer < AdminUserListSerializer: ``silenced`` and
    ``silenced_till`` only while silenced (``include_silenced?``), ``suspended``/``suspended_till`` only
    while suspended, ``staged`` always, ``groups`` (BasicGroupSerializer) with the automatic ones."""
    data: dict[str, object] = {
        "id": 42,
        "username": "alice",
        "active": True,
        "admin": False,
        "moderator": False,
        "trust_level": 2,
        "manual_locked_trust_level": None,
        "staged": False,
        "post_count": 12,
        "groups": [
            {"id": 10, "name": "trust_level_0", "automatic": True},
            {"id": 11, "name": "trust_level_1", "automatic": True},
            {"id": 12, "name": "trust_level_2", "automatic": True},
            {"id": 41, "name": "Support", "automatic": False},
        ],
    }
    data.update(extra)
    return data


@respx.mock
def test_get_user_reads_the_admin_route_by_id(client: DiscourseClient) -> None:
    route = respx.get(f"{BASE}/admin/users/42.json").respond(json=admin_user_json())
    member = client.get_user(42)
    assert route.calls.last.request.headers["Api-Username"] == "citebot"
    assert (member.id, member.username, member.trust_level) == (42, "alice", 2)
    assert member.groups == frozenset(
        {"10", "11", "12", "41", "trust_level_0", "trust_level_1"} | {"trust_level_2", "support"}
    )
    assert (member.silenced, member.suspended, member.staged, member.staff) == (False, False, False, False)
    assert member.complete


@respx.mock
def test_a_silenced_suspended_or_staged_account_reads_as_such(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/admin/users/42.json").respond(
        json=admin_user_json(silenced=True, silenced_till="2999-01-01T00:00:00.000Z")
    )
    respx.get(f"{BASE}/admin/users/43.json").respond(
        json=admin_user_json(id=43, suspended=True, suspended_till="2999-01-01T00:00:00.000Z")
    )
    respx.get(f"{BASE}/admin/users/44.json").respond(json=admin_user_json(id=44, staged=True, trust_level=0))
    assert client.get_user(42).silenced
    assert client.get_user(43).suspended
    assert client.get_user(44).staged


def test_a_penalty_counts_only_while_its_date_is_ahead() -> None:
    # include_silenced_till? is `silenced_till?`: a past date is still serialized, without `silenced`.
    past = Member.from_json(admin_user_json(silenced_till="2024-01-01T00:00:00.000Z"), complete=True, now=NOW)
    ahead = Member.from_json(admin_user_json(suspended_till="2025-06-02T00:00:00Z"), complete=True, now=NOW)
    garbled = Member.from_json(admin_user_json(silenced_till="next tuesday"), complete=True, now=NOW)
    assert not past.silenced
    assert ahead.suspended
    assert garbled.silenced  # a penalty the bot cannot date is one it respects


@respx.mock
def test_get_user_without_staff_rights_is_an_auth_error(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/admin/users/42.json").respond(
        403,
        json={
            "errors": ["You are not permitted to view the requested resource."],
            "error_type": "invalid_access",
        },
    )
    respx.get(f"{BASE}/admin/users/9.json").respond(
        404, json={"errors": ["Not found"], "error_type": "not_found"}
    )
    with pytest.raises(AuthError):
        client.get_user(42)
    with pytest.raises(NotFoundError):
        client.get_user(9)


@respx.mock
def test_get_user_by_username_reads_the_public_profile_as_incomplete(client: DiscourseClient) -> None:
    route = respx.get(f"{BASE}/u/al%20ice.json").respond(
        json={
            "user_badges": [],
            "user": {
                "id": 42,
                "username": "al ice",
                "trust_level": 1,
                "admin": False,
                "moderator": True,
                "suspended_till": "2999-01-01T00:00:00.000Z",
                "groups": [{"id": 3, "name": "staff"}],
            },
        }
    )
    member = client.get_user_by_username("al ice")
    assert route.called
    assert (member.staff, member.suspended) == (True, True)
    assert member.groups == frozenset({"3", "staff"})
    assert not member.complete  # UserSerializer has no silenced field; staged is staff-only


@respx.mock
def test_get_topic_reads_closed_archived_can_reply_and_pm_participants(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/t/7.json").respond(
        json={
            "id": 7,
            "title": "A chat",
            "slug": "a-chat",
            "archetype": "private_message",
            "closed": True,
            "archived": False,
            "category_id": None,
            "post_stream": {"posts": [], "stream": []},
            "details": {
                "can_create_post": True,
                "allowed_users": [{"id": 42, "username": "alice"}, {"id": 7, "username": "citebot"}],
                "allowed_groups": [{"id": 41, "name": "Support"}],
            },
        }
    )
    respx.get(f"{BASE}/t/8.json").respond(
        json={
            "id": 8,
            "title": "Read only",
            "slug": "read-only",
            "archetype": "regular",
            "closed": False,
            "archived": True,
            "post_stream": {"posts": [], "stream": []},
            "details": {"can_edit": False},  # can_create_post is left out when false
        }
    )
    pm = client.get_topic(7)
    assert (pm.private_message, pm.closed, pm.archived, pm.can_reply) == (True, True, False, True)
    assert pm.allowed_users == ("alice", "citebot")
    assert pm.allowed_groups == ("Support",)
    other = client.get_topic(8)
    assert (other.archived, other.can_reply, other.private_message) == (True, False, False)
    assert (other.allowed_users, other.allowed_groups) == ((), ())
