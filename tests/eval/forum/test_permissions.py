"""The forum double is as strict as Discourse: each test names the Discourse source (file and method) whose
behaviour it pins, and checks the double does the same, refusals included.

Forum: the tiny export plus a topic in a read-restricted category of the group ``insiders`` (13), one in a
staff category (14); category 6 public. Accounts: citebot and system (admins), ``mod`` (moderator),
``tl4`` (trust level 4), ``insider`` (group insiders), ``muted`` (silenced), ``barred`` (suspended),
alice/bob/carol/dave (members, trust level 1).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import serve
from tests.eval.forum.export import TOPICS, write_export

pytestmark = pytest.mark.integration

KEY = "perm-forum-key"
ZEPPELIN = "zeppelin"  # a word only the insiders' topic holds
QUOKKA = "quokka"  # a word only the staff topic holds

PERM_TOPICS: list[dict[str, object]] = [
    *[dict(t, tags=["physics", "secret"]) if t["id"] == 12 else t for t in TOPICS],
    {
        "id": 13,
        "title": "Insider roadmap discussion",
        "category_id": 8,
        "posts": [("alice", "The confidential roadmap mentions a zeppelin renderer for insiders only.")],
    },
    {
        "id": 14,
        "title": "Staff moderation notes",
        "category_id": 9,
        "posts": [("bob", "Staff notes about the quokka incident and the moderation policy here.")],
    },
]


class Receiver:
    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []

        async def hook(request: Request) -> Response:
            self.got.append((request.headers["x-discourse-event"], json.loads(await request.body())))
            return Response("ok")

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.fixture
def store(empty_db_url: str, tmp_path: Path) -> Iterator[ForumStore]:
    s = ForumStore(empty_db_url)
    load_export(s, write_export(tmp_path / "export", PERM_TOPICS))
    yield s
    s.close()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    r = Receiver()
    with serve(r.app) as url:
        yield r, url + "/hook"


Make = Callable[..., tuple[ForumApp, TestClient]]


@pytest.fixture
def make(store: ForumStore, receiver: tuple[Receiver, str]) -> Iterator[Make]:
    """Build the forum with ``ForumConfig`` overrides; the members are added through the control."""
    opened: list[tuple[ForumApp, TestClient]] = []

    def build(**overrides: Any) -> tuple[ForumApp, TestClient]:
        config = ForumConfig(
            api_key=KEY,
            webhook_url=receiver[1],
            base_url="http://forum.local",
            admins=("system", "citebot"),
            categories={6: ("Support", False), 8: ("Insiders", True), 9: ("Staff", True)},
            category_groups={8: ("insiders",), 9: ("staff",)},
            staff_only_tags=("secret",),
        )
        for key, value in overrides.items():
            setattr(config, key, value)
        app = create_forum_app(store, config)
        client = TestClient(app.app)
        client.__enter__()
        for body in (
            {"username": "mod", "moderator": True},
            {"username": "tl4", "trust_level": 4},
            {"username": "insider", "groups": ["insiders"]},
            {"username": "muted", "silenced": True},
            {"username": "barred", "suspended": True},
        ):
            assert client.post("/__forum/users", headers=as_user("system"), json=body).status_code == 200
        opened.append((app, client))
        return app, client

    yield build
    for app, client in opened:
        client.__exit__(None, None, None)
        app.close()


@pytest.fixture
def forum(make: Make) -> tuple[ForumApp, TestClient]:
    return make()


def as_user(name: str) -> dict[str, str]:
    return {"Api-Key": KEY, "Api-Username": name}


def events(app: ForumApp, receiver: tuple[Receiver, str]) -> list[tuple[str, dict[str, Any]]]:
    """The webhooks delivered so far (and forget them)."""
    assert app.webhooks.flush()
    got = list(receiver[0].got)
    receiver[0].got.clear()
    return got


def reply(http: TestClient, who: str, topic_id: int, raw: str, **extra: Any) -> Any:
    return http.post("/posts.json", headers=as_user(who), json={"topic_id": topic_id, "raw": raw, **extra})


def search_topics(http: TestClient, term: str, who: str | None = None) -> list[int]:
    headers = as_user(who) if who else {}
    return [t["id"] for t in http.get("/search.json", params={"q": term}, headers=headers).json()["topics"]]


# -- reads ---------------------------------------------------------------------------------------


def test_restricted_category_topics_are_seen_by_admins_and_group_members_only(
    forum: tuple[ForumApp, TestClient],
) -> None:
    """lib/guardian/category_guardian.rb ``can_see_category?`` and lib/guardian/topic_guardian.rb
    ``can_see_topic?``; app/controllers/topics_controller.rb ``show`` answers 404 for InvalidAccess."""
    _, http = forum
    assert http.get("/t/13.json").status_code == 404
    assert http.get("/t/13.json", headers=as_user("alice")).status_code == 404
    assert http.get("/t/13.json", headers=as_user("insider")).status_code == 200
    assert http.get("/t/13.json", headers=as_user("citebot")).status_code == 200
    assert http.get("/t/13.json", headers=as_user("mod")).status_code == 404  # not in insiders
    assert http.get("/t/14.json", headers=as_user("mod")).status_code == 200  # staff group
    assert http.get("/t/14.json", headers=as_user("tl4")).status_code == 404
    assert http.get("/t/10.json").status_code == 200


def test_a_post_the_caller_may_not_see_is_403(forum: tuple[ForumApp, TestClient]) -> None:
    """app/controllers/posts_controller.rb ``find_post_using`` → ``guardian.ensure_can_see!(post)``
    (lib/guardian/post_guardian.rb ``can_see_post?``): 403 invalid_access; the same for ``by_number``."""
    _, http = forum
    denied = http.get("/posts/1301.json")
    assert (denied.status_code, denied.json()["error_type"]) == (403, "invalid_access")
    assert http.get("/posts/by_number/13/1.json", headers=as_user("alice")).status_code == 403
    assert (
        http.get("/posts/1301.json", headers=as_user("insider")).json()["raw"].startswith("The confidential")
    )
    assert http.get("/t/13/posts.json", params=[("post_ids[]", "1301")]).status_code == 403


def test_search_is_run_as_the_caller(forum: tuple[ForumApp, TestClient]) -> None:
    """lib/search.rb ``posts_query``: ``(categories.id IS NULL) OR (NOT categories.read_restricted) OR
    (categories.id IN secure_category_ids)``; app/models/user.rb ``secure_category_ids`` gives an admin
    every read-restricted category."""
    _, http = forum
    assert search_topics(http, ZEPPELIN) == []
    assert search_topics(http, ZEPPELIN, "alice") == []
    assert search_topics(http, ZEPPELIN, "insider") == [13]
    assert search_topics(http, ZEPPELIN, "citebot") == [13]
    assert search_topics(http, QUOKKA, "mod") == [14]
    assert search_topics(http, QUOKKA, "insider") == []


def test_latest_posts_follow_the_callers_categories(forum: tuple[ForumApp, TestClient]) -> None:
    """app/controllers/posts_controller.rb ``latest``: ``Post.public_posts.visible`` of type regular in
    ``Category.secured(guardian)``."""
    _, http = forum

    def ids(who: str | None) -> set[int]:
        body = http.get("/posts.json", headers=as_user(who) if who else {}).json()
        return {p["topic_id"] for p in body["latest_posts"]}

    assert ids(None) == {10, 11, 12}
    assert ids("insider") == {10, 11, 12, 13}
    assert ids("citebot") == {10, 11, 12, 13, 14}


def test_latest_posts_page_by_id_with_the_fields_the_api_backfill_reads(
    forum: tuple[ForumApp, TestClient],
) -> None:
    """``LatestPostsQuery#public_posts``: ``ORDER BY id DESC``, ``posts.id < before`` (``before`` <= 0
    ignored), ``where(categories: {id: Category.secured(guardian)})`` on the joined category, so a topic
    without one is left out even for an admin; ``add_raw``, ``add_excerpt``, ``add_title``."""
    app, http = forum
    admin = as_user("citebot")
    body = http.get("/posts.json", headers=admin).json()["latest_posts"]
    ids = [p["id"] for p in body]
    assert ids == sorted(ids, reverse=True)
    assert {"raw", "excerpt", "topic_title", "topic_html_title", "category_id", "topic_slug"} <= set(body[0])
    below = http.get("/posts.json", headers=admin, params={"before": ids[1]}).json()["latest_posts"]
    assert [p["id"] for p in below] == ids[2:]
    assert http.get("/posts.json", headers=admin, params={"before": 0}).json()["latest_posts"] == body
    with app.store.connection() as conn:
        conn.execute("UPDATE forum.topics SET category_id = NULL WHERE id = 10")
    after = http.get("/posts.json", headers=admin).json()["latest_posts"]
    assert 10 not in {p["topic_id"] for p in after}


def test_site_json_lists_the_categories_the_caller_may_see(make: Make) -> None:
    """app/models/site.rb ``categories``: ``can_see_serialized_category?`` for each cached category."""
    _, http = make()
    # Uncategorized (uncategorized_category_id, 1 here) is a category like the others, public.
    visible = {c["id"] for c in http.get("/site.json").json()["categories"]}
    assert visible == {1, 6, 7}
    assert {c["id"] for c in http.get("/site.json", headers=as_user("insider")).json()["categories"]} == {
        1,
        6,
        7,
        8,
    }
    everything = http.get("/site.json", headers=as_user("citebot")).json()["categories"]
    assert {c["id"]: c["read_restricted"] for c in everything} == {
        1: False,
        6: False,
        7: False,
        8: True,
        9: True,
    }


def test_lazy_loaded_categories_are_the_sidebar_and_its_ancestors(make: Make) -> None:
    """app/models/site.rb ``categories`` with ``can_lazy_load_categories?``: only the user's
    ``secured_sidebar_category_ids`` and ``Category.ancestors_of`` them; nothing for an anonymous caller;
    a subcategory whose parent is not listed is dropped."""
    _, http = make(lazy_load_categories=True, sidebar_category_ids=(7,), category_parents={7: 6})
    assert http.get("/site.json").json()["categories"] == []
    assert [c["id"] for c in http.get("/site.json", headers=as_user("alice")).json()["categories"]] == [6, 7]
    http.post(
        "/__forum/users", headers=as_user("system"), json={"username": "insider", "sidebar_category_ids": [8]}
    )
    assert [c["id"] for c in http.get("/site.json", headers=as_user("insider")).json()["categories"]] == [8]


def test_staff_only_tags_are_shown_to_staff_only(forum: tuple[ForumApp, TestClient]) -> None:
    """lib/discourse_tagging.rb ``hidden_tag_names`` (a staff-only tag group) and
    app/serializers/topic_view_serializer.rb ``tags`` → ``topic.tags.visible(guardian)``; lib/search.rb
    likewise for the topics of a search."""
    _, http = forum
    assert http.get("/t/12.json").json()["tags"] == ["physics"]
    assert http.get("/t/12.json", headers=as_user("mod")).json()["tags"] == ["physics", "secret"]
    hit = http.get("/search.json", params={"q": "jitter"}).json()["topics"]
    assert hit[0]["tags"] == ["physics"]


def test_private_messages_are_seen_by_participants_and_admins(forum: tuple[ForumApp, TestClient]) -> None:
    """lib/guardian/topic_guardian.rb ``can_see_topic?``: admins see every topic; a PM otherwise only its
    ``all_allowed_users``; ``can_create_post_on_topic?`` lets an admin post in any PM."""
    _, http = forum
    pm = http.post(
        "/posts.json",
        headers=as_user("carol"),
        json={
            "title": "A private question for dave",
            "raw": "Dave, can you help me privately with this?",
            "archetype": "private_message",
            "target_recipients": "dave",
        },
    ).json()
    tid = pm["topic_id"]
    assert http.get(f"/t/{tid}.json", headers=as_user("dave")).status_code == 200
    assert http.get(f"/t/{tid}.json", headers=as_user("bob")).status_code == 404
    assert http.get(f"/t/{tid}.json", headers=as_user("mod")).status_code == 404
    assert http.get(f"/t/{tid}.json").status_code == 404
    allowed = http.get(f"/t/{tid}.json", headers=as_user("citebot")).json()["details"]["allowed_users"]
    assert {u["username"] for u in allowed} == {"carol", "dave"}
    assert reply(http, "citebot", tid, "An admin may answer in any private message.").status_code == 200
    assert reply(http, "bob", tid, "A member may not reply in someone else's message.").status_code == 422
    assert search_topics(http, "privately", "citebot") == []  # search never lists PMs by default


# -- whispers and hidden posts -------------------------------------------------------------------


def test_whispers_are_made_and_seen_by_whisperers_only(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/controllers/posts_controller.rb ``create_params`` (``whisper == "true"`` needs
    ``can_create_whisper?``, else InvalidAccess); app/models/concerns/roleable.rb ``whisperer?`` (admins and
    ``whispers_allowed_groups``); app/models/topic.rb ``visible_post_types``; lib/topic_view.rb
    ``filter_post_types``; lib/search.rb ``posts_query`` for an admin."""
    app, http = forum
    refused = reply(http, "alice", 10, "A member cannot whisper this to staff.", whisper="true")
    assert (refused.status_code, refused.json()["error_type"]) == (403, "invalid_access")
    whisper = reply(http, "mod", 10, "Staff only: the walrus workaround is risky.", whisper="true").json()
    assert whisper["post_type"] == 4

    def stream(who: str | None) -> list[int]:
        headers = as_user(who) if who else {}
        return list(http.get("/t/10.json", headers=headers).json()["post_stream"]["stream"])

    assert whisper["id"] not in stream(None)
    assert whisper["id"] not in stream("alice")
    assert whisper["id"] in stream("citebot")
    assert whisper["id"] in stream("mod")
    assert http.get(f"/posts/{whisper['id']}.json", headers=as_user("alice")).status_code == 403
    assert search_topics(http, "walrus", "citebot") == [10]
    assert search_topics(http, "walrus", "alice") == []
    assert search_topics(http, "walrus") == []
    sent = events(app, receiver)
    assert [(e, b["post"]["post_type"]) for e, b in sent] == [("post_created", 4)]


def test_whispers_are_off_without_allowed_groups(make: Make) -> None:
    """app/models/concerns/roleable.rb ``whisperer?``: false for everyone, admins included, while
    ``whispers_allowed_groups`` is empty."""
    _, http = make(whispers_allowed_groups=())
    assert (
        reply(http, "citebot", 10, "Trying to whisper with whispers off.", whisper="true").status_code == 403
    )


def test_hidden_posts_are_withheld_from_non_staff(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/models/post.rb ``hide!`` (no post event); app/serializers/basic_post_serializer.rb
    ``cooked_hidden``; app/serializers/post_serializer.rb ``include_raw?``; lib/guardian/post_guardian.rb
    ``can_see_hidden_post?`` (staff and the author); lib/search.rb and posts_controller.rb ``latest``
    never list a hidden post."""
    app, http = forum
    assert http.post(
        "/__forum/posts/1002/hide", headers=as_user("system"), json={"flagger": "alice"}
    ).is_success
    stream = http.get("/t/10.json").json()["post_stream"]["posts"]
    hidden = next(p for p in stream if p["id"] == 1002)
    assert hidden["cooked_hidden"] is True
    assert "precision" not in hidden["cooked"]
    assert http.get("/posts/1002.json").status_code == 403
    assert http.get("/posts/1002.json", headers=as_user("alice")).status_code == 403
    own = http.get("/posts/1002.json", headers=as_user("bob")).json()
    assert own["raw"].startswith("Add a precision")
    assert own["cooked_hidden"] is True
    staff = http.get("/posts/1002.json", headers=as_user("mod")).json()
    assert "precision" in staff["cooked"]
    assert "cooked_hidden" not in staff
    assert search_topics(http, "mediump") == []
    assert 1002 not in {p["id"] for p in http.get("/posts.json").json()["latest_posts"]}
    sent = [e for e, _ in events(app, receiver)]
    assert sent == ["reviewable_created", "reviewable_score_updated"]


def test_hiding_the_last_visible_post_unlists_the_topic(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/models/post.rb ``hide!``: with no visible regular post left, ``topic.update_status("visible",
    false, Discourse.system_user)``; ``unhide!`` of the first post relists it; config/initializers/
    012-web_hook_events.rb sends ``topic_visible_status_updated``; the reviewable's decision sends
    ``reviewable_transitioned_to`` (app/models/reviewable.rb ``transition_to``)."""
    app, http = forum
    rid = http.post("/__forum/posts/1201/hide", headers=as_user("system"), json={}).json()["reviewable_id"]
    sent = events(app, receiver)
    assert [e for e, _ in sent] == [
        "reviewable_created", "reviewable_score_updated", "post_created", "topic_visible_status_updated",
    ]  # fmt: skip
    assert sent[0][1]["reviewable"]["post_id"] == 1201
    assert sent[0][1]["reviewable"]["status"] == 0
    assert sent[2][1]["post"]["action_code"] == "visible.disabled"
    assert sent[3][1]["topic"]["visible"] is False
    assert search_topics(http, "rigid") == []
    assert http.put("/posts/1201/unhide.json", headers=as_user("alice")).status_code == 403
    assert http.put("/posts/1201/unhide.json", headers=as_user("mod")).status_code == 200
    sent = events(app, receiver)
    assert [e for e, _ in sent] == ["post_created", "topic_visible_status_updated"]
    assert sent[1][1]["topic"]["visible"] is True
    assert http.post(f"/__forum/reviewables/{rid}/agree", headers=as_user("system")).is_success
    assert [(e, b["reviewable"]["status"]) for e, b in events(app, receiver)] == [
        ("reviewable_transitioned_to", 1)
    ]


# -- posting ---------------------------------------------------------------------------------------


def close(
    http: TestClient, topic_id: int, status: str = "closed", enabled: str = "true", who: str = "mod"
) -> Any:
    return http.put(
        f"/t/{topic_id}/status.json", headers=as_user(who), json={"status": status, "enabled": enabled}
    )


def test_closed_topics_refuse_members_but_not_admins_moderators_or_tl4(
    forum: tuple[ForumApp, TestClient],
) -> None:
    """lib/guardian/topic_guardian.rb ``can_create_post_on_topic?``: ``return true if is_admin?``; trust
    level 4 and moderators may post in closed or archived topics; lib/post_creator.rb ``valid?`` answers a
    refusal with the ``topic_not_found`` error (422)."""
    _, http = forum
    assert close(http, 11).status_code == 200
    refused = reply(http, "alice", 11, "Can I still reply here after closing?")
    assert refused.status_code == 422
    assert refused.json()["action"] == "create_post"
    assert reply(http, "citebot", 11, "The admin bot may still answer in here.").status_code == 200
    assert reply(http, "mod", 11, "A moderator may still post in a closed topic.").status_code == 200
    assert reply(http, "tl4", 11, "Trust level four may also post in closed topics.").status_code == 200


def test_authors_may_edit_in_closed_but_not_archived_topics(forum: tuple[ForumApp, TestClient]) -> None:
    """lib/guardian/post_guardian.rb ``can_edit_post?``: staff where ``can_create_post?``; an author
    unless the topic is archived (closing does not stop edits)."""
    _, http = forum
    close(http, 11)
    edited = http.put(
        "/posts/1102.json", headers=as_user("alice"), json={"post": {"raw": "@citebot edited later on"}}
    )
    assert edited.status_code == 200
    close(http, 11, "archived")
    refused = http.put(
        "/posts/1102.json", headers=as_user("alice"), json={"post": {"raw": "archived edit try"}}
    )
    assert refused.status_code == 403
    ok = http.put(
        "/posts/1102.json", headers=as_user("mod"), json={"post": {"raw": "a moderator may edit it"}}
    )
    assert ok.status_code == 200


def test_silenced_and_suspended_members_cannot_post(forum: tuple[ForumApp, TestClient]) -> None:
    """lib/guardian/post_guardian.rb ``can_create_post_in_topic`` (``SpamRule::AutoSilence.prevent_posting?``:
    a silenced user only in a PM that lists them); lib/guardian.rb ``can_send_private_message?`` (silenced:
    staff targets only); lib/post_creator.rb ``valid?`` (``user_is_suspended``)."""
    _, http = forum
    assert reply(http, "muted", 10, "A silenced member replying in public.").status_code == 422
    pm = {
        "title": "A message for the moderators",
        "raw": "Please lift my silence, I promise.",
        "archetype": "private_message",
    }
    assert (
        http.post(
            "/posts.json", headers=as_user("muted"), json={**pm, "target_recipients": "alice"}
        ).status_code
        == 422
    )
    staff_pm = http.post("/posts.json", headers=as_user("muted"), json={**pm, "target_recipients": "mod"})
    assert staff_pm.status_code == 200
    assert (
        reply(http, "muted", staff_pm.json()["topic_id"], "And a reply in my own message.").status_code == 200
    )
    assert reply(http, "barred", 10, "A suspended member replying in public.").status_code == 422


def test_new_topics_need_a_category_the_user_may_post_in(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """lib/topic_creator.rb ``setup_topic_params``: ``ensure_can_create!(Topic, category)`` (403) and an
    existing category (400); lib/post_creator.rb ``trigger_after_events``: ``topic_created`` then
    ``post_created``."""
    app, http = forum
    body = {"title": "A question about the roadmap", "raw": "What does the roadmap say about renderers?"}
    assert http.post("/posts.json", headers=as_user("alice"), json={**body, "category": 8}).status_code == 403
    assert (
        http.post("/posts.json", headers=as_user("alice"), json={**body, "category": 99}).status_code == 400
    )
    assert (
        http.post("/posts.json", headers=as_user("insider"), json={**body, "category": 8}).status_code == 200
    )
    assert [e for e, _ in events(app, receiver)] == ["topic_created", "post_created"]


def test_mentions_notify_only_users_who_can_see_the_post(forum: tuple[ForumApp, TestClient]) -> None:
    """app/services/post_alerter.rb: a user is notified only if ``can_receive_post_notifications?``
    (lib/guardian/post_guardian.rb → ``can_see_post?``)."""
    _, http = forum
    reply(http, "mod", 10, "Staff only: @alice should not hear of this whisper.", whisper="true")
    reply(http, "insider", 13, "Insiders only: @bob is not in our group at all.")
    for who in ("alice", "bob"):
        assert http.get("/notifications.json", headers=as_user(who)).json()["notifications"] == []


# -- moderation and its events -------------------------------------------------------------------


def test_topic_status_changes_send_the_topic_events(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/controllers/topics_controller.rb ``status`` (``can_close_topic?`` / ``can_archive_topic?`` /
    ``can_toggle_topic_visibility?``); app/models/topic.rb ``update_status`` → app/services/
    topic_status_updater.rb (a small-action post) and ``DiscourseEvent :topic_status_updated`` →
    ``topic_#{status}_status_updated`` (config/initializers/012-web_hook_events.rb)."""
    app, http = forum
    assert close(http, 10, who="alice").status_code == 403
    assert close(http, 10, "visible", "false", who="citebot").json() == {
        "success": "OK",
        "topic_status_update": None,
    }
    sent = events(app, receiver)
    assert [e for e, _ in sent] == ["post_created", "topic_visible_status_updated"]
    assert sent[1][1]["topic"]["id"] == 10
    assert sent[1][1]["topic"]["visible"] is False
    # unlisted: readable by direct link (can_see_topic? ignores `visible`), never listed or searched
    assert http.get("/t/10.json").status_code == 200
    assert search_topics(http, "precision") == []
    assert 10 not in {p["topic_id"] for p in http.get("/posts.json").json()["latest_posts"]}
    close(http, 10, "closed")
    close(http, 10, "closed")  # no change: no small action, the event all the same
    assert [e for e, _ in events(app, receiver)] == [
        "post_created", "topic_closed_status_updated", "topic_closed_status_updated",
    ]  # fmt: skip


def test_category_permission_changes_send_category_updated(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/controllers/categories_controller.rb ``update``/``create`` (admins: lib/guardian/
    category_guardian.rb ``can_edit_category?``); app/models/category.rb ``resolve_permissions`` and
    ``trigger_category_updated_event``; app/serializers/web_hook_category_serializer.rb (with
    ``read_restricted`` and ``group_permissions``)."""
    app, http = forum
    staff_only = {"permissions": {"staff": 1}}
    assert http.put("/categories/6.json", headers=as_user("alice"), json=staff_only).status_code == 403
    updated = http.put("/categories/6.json", headers=as_user("citebot"), json=staff_only)
    assert updated.status_code == 200
    assert updated.json()["category"]["read_restricted"] is True
    sent = events(app, receiver)
    assert [e for e, _ in sent] == ["category_updated"]
    category = sent[0][1]["category"]
    assert (category["id"], category["read_restricted"]) == (6, True)
    assert category["group_permissions"] == [{"permission_type": 1, "group_name": "staff"}]
    assert http.get("/t/10.json").status_code == 404
    assert search_topics(http, "precision") == []
    http.put("/categories/6.json", headers=as_user("citebot"), json={"permissions": {"everyone": 1}})
    assert events(app, receiver)[0][1]["category"]["read_restricted"] is False
    assert http.get("/t/10.json").status_code == 200
    created = http.post("/categories.json", headers=as_user("citebot"), json={"name": "Announcements"})
    assert created.status_code == 200
    assert [(e, b["category"]["name"]) for e, b in events(app, receiver)] == [
        ("category_created", "Announcements")
    ]


def test_moving_posts_sends_no_post_event_and_follows_the_destination(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/models/post_mover.rb: moved posts change topic in place (``move``: no post event); a new
    destination is ``Topic.create!`` (no ``topic_created``); the ``split_topic`` small action goes into the
    original topic (``post_created``); app/controllers/topics_controller.rb ``move_posts`` needs
    ``can_move_posts?`` (lib/guardian/topic_guardian.rb)."""
    app, http = forum
    body = {"post_ids": [1102, 1103], "title": "Split: the frame rate counter patch", "category_id": 8}
    assert http.post("/t/11/move-posts.json", headers=as_user("alice"), json=body).status_code == 403
    moved = http.post("/t/11/move-posts.json", headers=as_user("citebot"), json=body).json()
    assert moved["success"] is True
    new_id = int(moved["url"].rsplit("/", 1)[1])
    assert http.get("/posts/1102.json", headers=as_user("citebot")).json()["topic_id"] == new_id
    assert http.get("/posts/1102.json").status_code == 403  # now in the insiders' category
    sent = events(app, receiver)
    assert [(e, b["post"]["topic_id"], b["post"]["action_code"]) for e, b in sent] == [
        ("post_created", 11, "split_topic")
    ]
    assert http.get("/t/11.json").json()["post_stream"]["stream"][0] == 1101


def test_moving_a_first_post_copies_it_and_moving_all_closes_the_original(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/models/post_mover.rb ``create_first_post`` (``PostCreator``: ``post_created`` for a new post,
    the original stays) and ``close_topic_and_schedule_deletion`` when every post moves; moving to a PM
    (``archetype=private_message``) makes the authors participants and the notice a whisper."""
    app, http = forum
    body = {"post_ids": [1201], "title": "Moved into a private message", "archetype": "private_message"}
    new_id = int(
        http.post("/t/12/move-posts.json", headers=as_user("citebot"), json=body)
        .json()["url"]
        .rsplit("/", 1)[1]
    )
    sent = events(app, receiver)
    kinds = [(e, b.get("post", {}).get("topic_id"), b.get("post", {}).get("post_type")) for e, b in sent]
    assert kinds[0] == ("post_created", new_id, 1)  # the copy of the first post
    assert kinds[1] == ("post_created", 12, 4)  # the split notice, a whisper
    assert [e for e, _ in sent[2:]] == ["post_created", "topic_closed_status_updated"]
    assert sent[0][1]["post"]["id"] != 1201
    assert http.get(f"/t/{new_id}.json").status_code == 404
    assert http.get(f"/t/{new_id}.json", headers=as_user("dave")).status_code == 200
    assert http.get("/t/12.json").json()["closed"] is True


def test_anonymizing_rewrites_the_username_without_a_webhook(
    forum: tuple[ForumApp, TestClient], receiver: tuple[Receiver, str]
) -> None:
    """app/controllers/admin/users_controller.rb ``anonymize`` (``success_json`` + ``username``);
    lib/guardian/user_guardian.rb ``can_anonymize_user?`` (staff, of a non-staff user);
    app/services/user_anonymizer.rb and UsernameChanger: no webhook."""
    app, http = forum
    reply(http, "bob", 11, '[quote="alice, post:2, topic:11"]\nNice[/quote]\n\nthanks @alice for this')
    events(app, receiver)
    assert http.put("/admin/users/2/anonymize.json", headers=as_user("bob")).status_code == 404
    assert http.put("/admin/users/1/anonymize.json", headers=as_user("mod")).status_code in (403, 404)
    done = http.put("/admin/users/2/anonymize.json", headers=as_user("mod")).json()
    assert done["success"] == "OK"
    assert done["username"].startswith("anon")
    assert http.get("/posts/1102.json").json()["username"] == done["username"]
    quoting = http.get("/t/11.json").json()["post_stream"]["posts"][-1]["id"]
    raw = http.get(f"/posts/{quoting}.json").json()["raw"]
    assert "alice" not in raw
    assert done["username"] in raw
    assert events(app, receiver) == []


def test_user_json_shows_roles_and_groups(forum: tuple[ForumApp, TestClient]) -> None:
    """app/serializers/user_card_serializer.rb (trust_level, admin, moderator, ``suspended_till`` while
    suspended, ``staged`` to staff only) and user_serializer.rb ``groups``; silencing is in
    app/serializers/admin_user_list_serializer.rb (``silenced_till``), read by staff only."""
    _, http = forum
    insider = http.get("/u/insider.json").json()["user"]
    assert (insider["trust_level"], insider["admin"], insider["moderator"]) == (1, False, False)
    assert {g["name"] for g in insider["groups"]} == {"insiders", "trust_level_0", "trust_level_1"}
    assert "staged" not in insider
    assert http.get("/u/insider.json", headers=as_user("mod")).json()["user"]["staged"] is False
    assert "suspended_till" in http.get("/u/barred.json").json()["user"]
    mod = http.get("/u/mod.json").json()["user"]
    assert mod["moderator"] is True
    assert "staff" in {g["name"] for g in mod["groups"]}
    muted_id = http.get("/u/muted.json").json()["user"]["id"]
    assert "silenced_till" not in http.get("/u/muted.json").json()["user"]
    assert http.get(f"/admin/users/{muted_id}.json", headers=as_user("alice")).status_code == 404
    admin_view = http.get(f"/admin/users/{muted_id}.json", headers=as_user("mod")).json()
    assert admin_view["silenced"] is True
    assert admin_view["silenced_till"].startswith("3000")
    assert http.get("/u/nobody-here.json").status_code == 404


def test_a_category_is_shown_to_whoever_may_see_it(forum: tuple[ForumApp, TestClient]) -> None:
    """app/controllers/categories_controller.rb ``show`` (``guardian.ensure_can_see!``, CategorySerializer
    under ``category``): what the indexer reads of a category it meets for the first time."""
    _, http = forum
    assert http.get("/c/8/show.json").status_code == 403
    assert http.get("/c/8/show.json", headers=as_user("insider")).json()["category"]["read_restricted"]
    shown = http.get("/c/6/show.json").json()["category"]
    assert (shown["id"], shown["name"], shown["read_restricted"]) == (6, "Support", False)
    assert http.get("/c/999/show.json", headers=as_user("citebot")).status_code == 404


def test_tag_groups_are_listed_to_staff(forum: tuple[ForumApp, TestClient]) -> None:
    """app/controllers/tag_groups_controller.rb (``ensure_staff``) and TagGroupSerializer: the staff-only
    tags are a group whose permissions name staff (group 3), never everyone (0)."""
    _, http = forum
    assert http.get("/tag_groups.json", headers=as_user("insider")).status_code == 403
    groups = http.get("/tag_groups.json", headers=as_user("mod")).json()["tag_groups"]
    assert [([t["name"] for t in g["tags"]], g["permissions"]) for g in groups] == [(["secret"], {"3": 1})]


def test_a_topic_without_a_category_is_filed_under_uncategorized(forum: tuple[ForumApp, TestClient]) -> None:
    """app/models/topic.rb ``ensure_topic_has_a_category`` (before_save): a regular topic gets
    ``SiteSetting.uncategorized_category_id``; a PM keeps none."""
    _, http = forum
    made = http.post(
        "/posts.json",
        headers=as_user("insider"),
        json={"title": "A topic with no category given", "raw": "Which category does this end up in?"},
    ).json()
    assert http.get(f"/t/{made['topic_id']}.json").json()["category_id"] == 1
