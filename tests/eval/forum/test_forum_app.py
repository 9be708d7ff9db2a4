from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export, parse_raw_file
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import serve
from tests.eval.forum.export import write_export
from worker.clients.discourse import DiscourseClient
from worker.errors import AuthError, NotFoundError, RateLimitedError, ServiceUnavailableError, ValidationError
from worker.settings import DiscourseSettings

pytestmark = pytest.mark.integration

KEY = "test-forum-key"
SECRET = "forum-webhook-secret"


class Receiver:
    """A webhook endpoint that records what it got."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []

        async def hook(request: Request) -> Response:
            self.got.append((dict(request.headers), await request.body()))
            return Response("ok")

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.fixture
def store(empty_db_url: str, tmp_path: Path) -> Iterator[ForumStore]:
    s = ForumStore(empty_db_url)
    load_export(s, write_export(tmp_path / "export"))
    yield s
    s.close()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    r = Receiver()
    with serve(r.app) as url:
        yield r, url + "/hook"


@pytest.fixture
def forum(store: ForumStore, receiver: tuple[Receiver, str]) -> Iterator[ForumApp]:
    app = create_forum_app(
        store,
        ForumConfig(
            api_key=KEY, webhook_url=receiver[1], webhook_secret=SECRET, base_url="http://forum.local"
        ),
    )
    yield app
    app.close()


@pytest.fixture
def http(forum: ForumApp) -> Iterator[TestClient]:
    with TestClient(forum.app) as c:
        yield c


def as_user(username: str) -> dict[str, str]:
    return {"Api-Key": KEY, "Api-Username": username}


def client_for(http: TestClient, username: str = "citebot") -> DiscourseClient:
    settings = DiscourseSettings(base_url="http://testserver", api_key=KEY, api_username=username)  # type: ignore[arg-type, call-arg]
    return DiscourseClient(http, settings)  # type: ignore[arg-type]  # TestClient speaks httpx's API


def test_raw_file_format_is_parsed() -> None:
    sep = "\n\n" + "-" * 25 + "\n"
    head = "{} | 2020-01-01 10:00:00 UTC | #{}\n\n"
    text = head.format("a", 1) + "first\n\nline" + sep + "\n" + head.format("b", 2) + "second" + sep
    assert parse_raw_file(text) == {1: "first\n\nline", 2: "second"}


def test_topic_post_and_stream_through_the_client(http: TestClient) -> None:
    client = client_for(http)
    topic = client.get_topic(11, all_posts=True)
    assert (topic.title, topic.slug, topic.category_id, topic.tags) == (
        "Simple FPS counter",
        "simple-fps-counter",
        7,
        ("ui",),
    )
    assert [p.post_number for p in topic.posts] == [1, 2, 3]
    post = client.get_post(1102)
    assert post.raw == "Nice, the debug hud also shows the frame rate. (raw)"
    assert (post.topic_id, post.username, post.topic_slug) == (11, "alice", "simple-fps-counter")
    page = http.get("/t/11/posts.json", params=[("post_ids[]", "1103")]).json()
    assert [p["id"] for p in page["post_stream"]["posts"]] == [1103]


def test_errors_have_discourse_shapes(http: TestClient) -> None:
    missing = http.get("/t/999.json")
    assert missing.status_code == 404
    assert missing.json() == {
        "errors": ["The requested URL or resource could not be found."],
        "error_type": "not_found",
    }
    bad_key = http.get("/posts/1001.json", headers={"Api-Key": "wrong", "Api-Username": "citebot"})
    assert (bad_key.status_code, bad_key.json()["error_type"]) == (403, "invalid_access")
    with pytest.raises(NotFoundError):
        client_for(http).get_post(5)
    with pytest.raises(AuthError):
        client_for(http, "nobody-here").get_post(1001)


def test_search_ands_terms_one_post_per_topic_and_weights_titles(http: TestClient) -> None:
    client = client_for(http)
    hits = client.search("shader android")
    assert [h.topic_id for h in hits] == [10]
    assert hits[0].topic_slug == "shader-compile-error-on-android"
    assert "shader" in hits[0].blurb.lower()
    counter = client.search("counter")
    assert [h.topic_id for h in counter] == [11]  # three posts match through the title: one hit
    assert client.search("shader physics") == []
    # title weight A beats body weight D: "physics" is in topic 12's title and body
    both = client.search("bodies")
    assert [h.topic_id for h in both] == [12]
    too_short = http.get("/search.json", params={"q": "ab"})
    assert too_short.status_code == 400
    assert too_short.json()["errors"] == ["Your search term is too short."]


def test_search_returns_each_topic_by_its_first_matching_post(http: TestClient) -> None:
    """``Search#aggregate_post_sql`` keeps ``min(posts.post_number)`` of a topic's matching posts: the
    question (#1), whose title every post's search data carries, even where a reply matches better."""
    client = client_for(http)
    both = client.search("shader precision")  # in #1 and in the reply #2
    assert [(h.topic_id, h.post_number) for h in both] == [(10, 1)]
    reply_only = client.search("mediump qualifier")  # only the reply #2 has these words
    assert [(h.topic_id, h.post_number) for h in reply_only] == [(10, 2)]


def test_likes_and_accepted_answers_are_served_as_discourse_does(empty_db_url: str, tmp_path: Path) -> None:
    """PostSerializer#actions_summary: likes as ``{"id": 2, "count": n}``, nothing for a post without
    likes; search's ``like_count`` (SearchPostSerializer) and discourse-solved's ``accepted_answer``."""
    topic = {
        "id": 30,
        "title": "Liked replies",
        "category_id": 6,
        "posts": [
            ("alice", "How do I turn on vsync in the engine?"),
            ("bob", "Set the vsync flag in the graphics options.", {"like_count": 4, "accepted_answer": 0}),
            ("carol", "Or pass -vsync on the command line.", {"accepted_answer": True}),
        ],
    }
    store = ForumStore(empty_db_url)
    try:
        load_export(store, write_export(tmp_path / "likes", [topic]))
        app = create_forum_app(store, ForumConfig(api_key=KEY, base_url="http://forum.local"))
        with TestClient(app.app) as http:
            posts = http.get("/t/30.json").json()["post_stream"]["posts"]
            assert [p["actions_summary"] for p in posts] == [[], [{"id": 2, "count": 4}], []]
            assert [p["accepted_answer"] for p in posts] == [False, False, True]
            hit = http.get("/search.json", params={"q": "vsync graphics options"}).json()
            assert [(p["post_number"], p["like_count"]) for p in hit["posts"]] == [(2, 4)]
            assert hit["topics"][0]["has_accepted_answer"] is True
    finally:
        store.close()


def test_a_user_api_key_acts_as_its_member_with_its_own_limit(http: TestClient, forum: ForumApp) -> None:
    """default_current_user_provider.rb: ``User-Api-Key`` acts as the key's member, counts against the
    key's max_user_api_reqs_per_minute (20), never the site-wide admin-API limiter; unknown key: 403."""
    added = http.post("/__forum/users", headers=as_user("system"), json={"username": "erin"})
    assert added.status_code == 200
    minted = http.post("/__forum/user-api-keys", headers=as_user("system"), json={"username": "erin"})
    key = {"User-Api-Key": minted.json()["key"]}
    admin_calls = forum.api_limiter.performed
    body = {"topic_id": 10, "raw": "Erin asks about precision qualifiers on Android."}
    posted = http.post("/posts.json", headers=key, json=body)
    assert (posted.status_code, posted.json()["username"]) == (200, "erin")
    for _ in range(19):
        assert http.get("/t/10.json", headers=key).status_code == 200
    refused = http.get("/t/10.json", headers=key)
    assert refused.status_code == 429
    assert refused.headers["Discourse-Rate-Limit-Error-Code"] == "user_api_key_limiter_60_secs"
    assert forum.api_limiter.performed == admin_calls
    assert http.get("/t/10.json", headers={"User-Api-Key": "nope"}).status_code == 403
    unknown = http.post("/__forum/user-api-keys", headers=as_user("system"), json={"username": "nobody"})
    assert unknown.status_code == 404


def test_members_post_notifications_and_signed_webhooks(
    http: TestClient, forum: ForumApp, receiver: tuple[Receiver, str]
) -> None:
    got = receiver[0].got
    r = http.post(
        "/posts.json",
        headers=as_user("alice"),
        json={"topic_id": 10, "raw": "@citebot how do I fix the precision error?"},
    )
    assert r.status_code == 200
    question = r.json()
    assert (question["post_number"], question["username"], question["topic_id"]) == (3, "alice", 10)
    assert forum.webhooks.flush()
    assert len(got) == 1
    headers, body = got[0]
    assert headers["x-discourse-event"] == "post_created"
    assert headers["x-discourse-event-type"] == "post"
    assert headers["x-discourse-instance"] == "http://forum.local"
    assert headers["x-discourse-event-id"] == "1"
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["x-discourse-event-signature"] == expected
    payload = json.loads(body)["post"]
    assert payload["raw"] == "@citebot how do I fix the precision error?"
    assert (payload["id"], payload["topic_archetype"], payload["category_id"], payload["version"]) == (
        question["id"], "regular", 6, 1,
    )  # fmt: skip
    assert "tags" not in payload

    bot = client_for(http)
    reply = bot.create_post(10, "Add a precision qualifier, see the answer above.", reply_to_post_number=3)
    assert reply.reply_to_post_number == 3
    follow_up = {
        "topic_id": 10,
        "raw": "thanks, and what about GLES3?",
        "reply_to_post_number": reply.post_number,
    }
    follow = http.post("/posts.json", headers=as_user("alice"), json=follow_up)
    assert follow.status_code == 200
    notes = bot.get_notifications()
    assert [(n.kind, n.post_id) for n in notes] == [
        ("replied", follow.json()["id"]),
        ("mentioned", question["id"]),
    ]
    # alice was notified of the bot's reply to her
    alice = http.get("/notifications.json", headers=as_user("alice")).json()["notifications"]
    assert [n["notification_type"] for n in alice] == [2]
    assert forum.webhooks.flush()
    assert [json.loads(b)["post"]["username"] for _, b in got] == ["alice", "citebot", "alice"]


def test_identical_posts_within_120s_return_the_first(http: TestClient, forum: ForumApp) -> None:
    body = {"topic_id": 12, "raw": "@citebot why do rigid bodies jitter so much?"}
    first = http.post("/posts.json", headers=as_user("dave"), json=body).json()
    second = http.post("/posts.json", headers=as_user("dave"), json=body).json()
    assert first["id"] == second["id"]
    assert forum.webhooks.flush()
    assert len(forum.webhooks.deliveries) == 1
    other_user = http.post("/posts.json", headers=as_user("bob"), json=body).json()
    assert other_user["id"] != first["id"]


def test_validation_and_auth_on_create(http: TestClient) -> None:
    client = client_for(http)
    with pytest.raises(ValidationError) as info:
        client.create_post(10, "too short")
    assert info.value.details == ("Body is too short (minimum is 20 characters)",)
    anonymous = http.post("/posts.json", json={"topic_id": 10, "raw": "x" * 30})
    assert anonymous.status_code == 403
    # PostCreator#valid?: a reply to a missing topic is a 422 ``topic_not_found`` error, not a 404.
    with pytest.raises(ValidationError):
        client.create_post(404, "a long enough body for a post")


def test_new_topic_and_private_message(http: TestClient) -> None:
    new_topic = {
        "title": "How do I load a scene?",
        "raw": "@citebot how do I load a scene from XML?",
        "category": 6,
    }
    topic = http.post("/posts.json", headers=as_user("carol"), json=new_topic)
    assert topic.status_code == 200
    assert topic.json()["post_number"] == 1
    pm_body = {
        "title": "A private question",
        "raw": "Can you help me privately with this?",
        "archetype": "private_message",
        "target_recipients": "citebot",
    }
    pm = http.post("/posts.json", headers=as_user("carol"), json=pm_body)
    assert pm.status_code == 200
    kinds = [n.kind for n in client_for(http).get_notifications()]
    assert kinds == ["private_message", "mentioned"]
    # the PM is invisible to others
    assert http.get(f"/t/{pm.json()['topic_id']}.json", headers=as_user("bob")).status_code == 404


def test_site_settings_declared_off_and_writable_by_admins(http: TestClient) -> None:
    client = client_for(http)
    names = [
        "citebot_enabled",
        "citebot_posts_pipeline",
        "citebot_input_gate",
        "citebot_rerank",
        "citebot_post_links",
    ]
    assert client.get_site_settings(names) == dict.fromkeys(names, False)
    client.set_site_setting("citebot_rerank", True)
    assert client.get_site_settings(["citebot_rerank"]) == {"citebot_rerank": True}
    # Not an admin, or a wrong key: no admin route matches (lib/admin_constraint.rb rescues
    # InvalidAccess), so Discourse answers 404, not 403.
    with pytest.raises(NotFoundError):
        client_for(http, "alice").get_site_settings(names)
    wrong = http.get("/admin/site_settings.json", headers={"Api-Key": "wrong", "Api-Username": "system"})
    assert (wrong.status_code, wrong.json()["error_type"]) == (404, "not_found")
    assert http.get("/posts/1001.json", headers={"Api-Key": "wrong"}).status_code == 403
    bad = http.put(
        "/admin/site_settings/citebot_rerank.json",
        headers=as_user("citebot"),
        json={"citebot_rerank": "maybe"},
    )
    assert bad.status_code == 422


def test_fault_knobs(http: TestClient, forum: ForumApp) -> None:
    client = client_for(http)
    r = http.post(
        "/__forum/faults",
        headers=as_user("citebot"),
        json={"rate_limit_next": 1, "retry_after_s": 9, "errors_next": 1},
    )
    assert r.json()["rate_limit_next"] == 1
    with pytest.raises(RateLimitedError) as info:
        client.get_post(1001)
    assert info.value.retry_after == 9
    with pytest.raises(ServiceUnavailableError):
        client.get_post(1001)
    assert client.get_post(1001).id == 1001
    forum.faults.update({"latency_s": 0.2})
    started = time.perf_counter()
    client.get_post(1001)
    assert time.perf_counter() - started >= 0.2
    forum.faults.update({"latency_s": 0.0, "drop_webhooks_next": 1})
    http.post(
        "/posts.json",
        headers=as_user("bob"),
        json={"topic_id": 12, "raw": "@citebot a dropped question here"},
    )
    assert forum.webhooks.flush()
    assert [d.status for d in forum.webhooks.deliveries] == ["dropped"]
    # a manual redelivery keeps the id and the body
    assert http.post("/__forum/webhooks/1/redeliver", headers=as_user("citebot")).status_code == 200
    assert forum.webhooks.flush()
    log = http.get("/__forum/webhooks", headers=as_user("citebot")).json()
    assert log == [{"event_id": 1, "event": "post_created", "status": 200, "attempts": 2}]
    assert http.post("/__forum/faults", json={"latency_s": 1}).status_code == 403


def test_edit_delete_recover_send_their_webhooks(
    http: TestClient, forum: ForumApp, receiver: tuple[Receiver, str]
) -> None:
    created = http.post(
        "/posts.json", headers=as_user("alice"), json={"topic_id": 12, "raw": "first text of my post here"}
    )
    post_id = created.json()["id"]
    assert (
        http.put(
            f"/posts/{post_id}.json", headers=as_user("bob"), json={"post": {"raw": "x" * 30}}
        ).status_code
        == 403
    )
    edited = http.put(
        f"/posts/{post_id}.json",
        headers=as_user("alice"),
        json={"post": {"raw": "@citebot edited to ask a question"}},
    )
    assert edited.status_code == 200
    assert edited.json()["post"]["version"] == 2
    assert client_for(http).get_post(post_id).raw == "@citebot edited to ask a question"
    assert [h.post_id for h in client_for(http).search("edited question")] == [post_id]
    assert http.delete(f"/posts/{post_id}.json", headers=as_user("alice")).status_code == 200
    assert http.get(f"/posts/{post_id}.json").status_code == 404
    assert http.put(f"/posts/{post_id}/recover.json", headers=as_user("citebot")).status_code == 200
    assert http.get(f"/posts/{post_id}.json").status_code == 200
    assert forum.webhooks.flush()
    events = [(h["x-discourse-event"], json.loads(b)["post"]["version"]) for h, b in receiver[0].got]
    assert events == [("post_created", 1), ("post_edited", 2), ("post_destroyed", 2), ("post_recovered", 2)]
    destroyed = json.loads(receiver[0].got[2][1])["post"]
    assert destroyed["deleted_at"] is not None


def test_members_can_be_added(http: TestClient) -> None:
    added = http.post("/__forum/users", headers=as_user("citebot"), json={"username": "erin"})
    assert (added.status_code, added.json()["username"], added.json()["admin"]) == (200, "erin", False)
    assert http.post("/__forum/users", headers=as_user("citebot"), json={"name": "x"}).status_code == 400
    posted = http.post(
        "/posts.json", headers=as_user("erin"), json={"topic_id": 11, "raw": "a new member says hello"}
    )
    assert (posted.status_code, posted.json()["user_id"]) == (200, added.json()["id"])
