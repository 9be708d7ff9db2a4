from __future__ import annotations

import httpx
import pytest
import respx

from worker.budget import ApiBudget
from worker.clients.discourse import DiscourseClient
from worker.errors import (
    AuthError,
    NotFoundError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    ValidationError,
)
from worker.settings import DiscourseSettings

BASE = "http://forum.test"


def post_json(post_id: int, number: int = 1, **extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "id": post_id,
        "name": "",
        "username": "alice",
        "created_at": "2024-01-01T00:00:00.000Z",
        "cooked": "<p>hello</p>",
        "post_number": number,
        "post_type": 1,
        "updated_at": "2024-01-01T00:00:00.000Z",
        "reply_to_post_number": None,
        "topic_id": 7,
        "topic_slug": "a-topic",
        "version": 1,
        "user_id": 12,
        "hidden": False,
        "deleted_at": None,
        "user_deleted": False,
    }
    data.update(extra)
    return data


@pytest.fixture
def client() -> DiscourseClient:
    settings = DiscourseSettings(base_url=BASE, api_key="k-123", api_username="citebot")  # type: ignore[arg-type, call-arg]
    return DiscourseClient(httpx.Client(), settings)


@respx.mock
def test_get_post_sends_auth_headers_and_parses_raw(client: DiscourseClient) -> None:
    route = respx.get(f"{BASE}/posts/5.json").respond(
        json=post_json(5, raw="@citebot help", reply_to_user={"username": "citebot", "name": ""})
    )
    post = client.get_post(5)
    request = route.calls.last.request
    assert request.headers["Api-Key"] == "k-123"
    assert request.headers["Api-Username"] == "citebot"
    assert post.raw == "@citebot help"
    assert post.reply_to_username == "citebot"
    assert (post.id, post.topic_id, post.topic_slug, post.user_id) == (5, 7, "a-topic", 12)


@respx.mock
def test_get_topic_fetches_the_rest_of_the_stream_in_chunks(client: DiscourseClient) -> None:
    ids = list(range(100, 145))
    first = [post_json(i, n + 1) for n, i in enumerate(ids[:20])]
    respx.get(f"{BASE}/t/7.json").respond(
        json={
            "id": 7,
            "title": "A topic",
            "slug": "a-topic",
            "category_id": 10,
            "archetype": "regular",
            "visible": True,
            "deleted_at": None,
            "tags": ["graphics", {"name": "lua"}],
            "post_stream": {"posts": first, "stream": ids},
        }
    )

    def page(request: httpx.Request) -> httpx.Response:
        wanted = [int(v) for v in request.url.params.get_list("post_ids[]")]
        assert len(wanted) <= 20
        return httpx.Response(200, json={"post_stream": {"posts": [post_json(i, i - 99) for i in wanted]}})

    route = respx.get(f"{BASE}/t/7/posts.json").mock(side_effect=page)
    topic = client.get_topic(7, all_posts=True)
    assert [p.id for p in topic.posts] == ids
    assert route.call_count == 2
    assert topic.tags == ("graphics", "lua")
    assert topic.posts[0].topic_title == "A topic"
    only_first = client.get_topic(7)
    assert len(only_first.posts) == 20


@respx.mock
def test_search_maps_posts_to_topics(client: DiscourseClient) -> None:
    route = respx.get(f"{BASE}/search.json").respond(
        json={
            "posts": [
                {"id": 1, "topic_id": 7, "post_number": 3, "blurb": "the shader…", "username": "a"},
                {"id": 2, "topic_id": 8, "post_number": 1, "blurb": "another", "username": "b"},
            ],
            "topics": [
                {"id": 7, "title": "Shaders", "slug": "shaders", "category_id": 6},
                {"id": 8, "title": "Other", "slug": "other", "category_id": None},
            ],
            "grouped_search_result": {"term": "shader"},
        }
    )
    hits = client.search("shader compile", limit=1)
    assert route.calls.last.request.url.params["q"] == "shader compile"
    assert len(hits) == 1
    assert (hits[0].post_id, hits[0].topic_slug, hits[0].post_number, hits[0].category_id) == (
        1,
        "shaders",
        3,
        6,
    )


@respx.mock
def test_create_post_posts_reply_fields(client: DiscourseClient) -> None:
    route = respx.post(f"{BASE}/posts.json").respond(json=post_json(99, 4, username="citebot"))
    post = client.create_post(7, "an answer", reply_to_post_number=3)
    import json

    assert json.loads(route.calls.last.request.content) == {
        "topic_id": 7,
        "raw": "an answer",
        "reply_to_post_number": 3,
    }
    assert post.id == 99


@respx.mock
def test_site_settings_read_and_write(client: DiscourseClient) -> None:
    read = respx.get(f"{BASE}/admin/site_settings.json", params={"plugin": "citebot"}).respond(
        json={
            "site_settings": [
                {"setting": "citebot_enabled", "value": "true", "type": "bool", "default": "false"},
                {"setting": "citebot_rerank", "value": False, "type": "bool"},
                {"setting": "citebot_other", "value": "x", "type": "string"},
            ]
        }
    )
    put = respx.put(f"{BASE}/admin/site_settings/citebot_rerank.json").respond(200)
    values = client.get_site_settings(["citebot_enabled", "citebot_rerank"])
    assert values == {"citebot_enabled": True, "citebot_rerank": False}
    assert dict(read.calls.last.request.url.params) == {"plugin": "citebot"}  # `filter` is ignored
    client.set_site_setting("citebot_rerank", True)
    assert put.calls.last.request.content == b'{"citebot_rerank":"true"}'


@respx.mock
def test_notifications_map_types(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/notifications.json").respond(
        json={
            "notifications": [
                {"id": 1, "notification_type": 1, "topic_id": 7, "post_number": 2,
                 "created_at": "2024-01-01T00:00:00Z", "data": {"original_post_id": 55}},
                {"id": 2, "notification_type": 2, "topic_id": 7, "post_number": 3,
                 "created_at": "2024-01-01T00:00:01Z", "data": {"original_post_id": 56}},
                {"id": 3, "notification_type": 6, "topic_id": 9, "post_number": 1,
                 "created_at": "2024-01-01T00:00:02Z", "data": {}},
                {"id": 4, "notification_type": 5, "topic_id": 9, "post_number": 1,
                 "created_at": "2024-01-01T00:00:03Z", "data": {}},
            ]
        }
    )  # fmt: skip
    notes = client.get_notifications()
    assert [(n.kind, n.post_id) for n in notes] == [
        ("mentioned", 55),
        ("replied", 56),
        ("private_message", None),
        ("other", None),
    ]


@respx.mock
def test_notifications_page_back_with_offset(client: DiscourseClient) -> None:
    route = respx.get(f"{BASE}/notifications.json", params={"offset": "60"}).respond(
        json={"notifications": []}
    )
    assert client.get_notifications(offset=60) == []
    assert route.called


@respx.mock
@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"Retry-After": "7"}, {"errors": ["slow down"], "error_type": "rate_limit"}, 7.0),
        ({}, {"errors": ["x"], "error_type": "rate_limit", "extras": {"wait_seconds": 12}}, 12.0),
        ({}, {"errors": ["x"]}, None),
    ],
)
def test_429_is_rate_limited_with_the_wait(
    client: DiscourseClient, headers: dict[str, str], body: dict[str, object], expected: float | None
) -> None:
    respx.get(f"{BASE}/posts/1.json").respond(429, json=body, headers=headers)
    with pytest.raises(RateLimitedError) as info:
        client.get_post(1)
    assert info.value.retry_after == expected
    assert info.value.status == 429


@respx.mock
@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, ServiceUnavailableError),
        (502, ServiceUnavailableError),
        (503, ServiceUnavailableError),
        (401, AuthError),
        (403, AuthError),
        (404, NotFoundError),
        (400, ValidationError),  # the one table of worker/clients/http.py (tests/worker/clients/test_http.py)
        (413, ValidationError),
        (409, PermanentError),
    ],
)
def test_status_codes_map_to_the_error_tree(
    client: DiscourseClient, status: int, error: type[Exception]
) -> None:
    respx.get(f"{BASE}/posts/1.json").respond(status, json={"errors": ["nope"], "error_type": "x"})
    with pytest.raises(error) as info:
        client.get_post(1)
    assert type(info.value) is error
    assert "nope" in str(info.value)


@respx.mock
def test_422_keeps_discourse_errors(client: DiscourseClient) -> None:
    respx.post(f"{BASE}/posts.json").respond(
        422, json={"action": "create_post", "errors": ["Body is too short", "Title is missing"]}
    )
    with pytest.raises(ValidationError) as info:
        client.create_post(7, "x")
    assert info.value.details == ("Body is too short", "Title is missing")


@respx.mock
def test_timeouts_and_connection_errors_are_unavailable(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/posts/1.json").mock(side_effect=httpx.ReadTimeout("slow"))
    respx.get(f"{BASE}/posts/2.json").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(ServiceUnavailableError, match="timed out"):
        client.get_post(1)
    with pytest.raises(ServiceUnavailableError, match="ConnectError"):
        client.get_post(2)


@respx.mock
def test_non_json_error_body_still_maps(client: DiscourseClient) -> None:
    respx.get(f"{BASE}/posts/1.json").respond(502, text="<html>Bad gateway</html>")
    with pytest.raises(ServiceUnavailableError):
        client.get_post(1)


@respx.mock
def test_every_call_takes_a_token_of_the_site_budget_and_a_429_pauses_it() -> None:
    # Discourse counts every admin-key request, whatever the route, against one limit.
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    settings = DiscourseSettings(base_url=BASE, api_requests_per_minute=30, api_burst=3, api_reserve=1)  # type: ignore[call-arg]
    client = DiscourseClient(
        httpx.Client(), settings, budget=ApiBudget(settings, sleep=sleep, clock=lambda: now[0])
    )
    respx.get(f"{BASE}/admin/site_settings.json").respond(json={"site_settings": []})
    respx.get(f"{BASE}/posts/1.json").respond(json=post_json(1))
    client.get_site_settings(["citebot_enabled"])
    for _ in range(3):
        client.get_post(1)
    # 3 from the burst, then one every 2 s at 30/min.
    assert slept == pytest.approx([2.0])
    respx.get(f"{BASE}/posts/2.json").respond(
        429,
        headers={"Retry-After": "7"},
        json={"errors": ["slow down"], "error_type": "rate_limit", "extras": {"wait_seconds": 7}},
    )
    with pytest.raises(RateLimitedError):
        client.get_post(2)
    slept.clear()
    client.get_post(1)
    assert sum(slept) == pytest.approx(7 + 2.0)  # the pause, then a token from empty


@respx.mock
def test_background_callers_leave_the_reserve_to_answers() -> None:
    now = [0.0]
    settings = DiscourseSettings(base_url=BASE, api_requests_per_minute=6, api_burst=5, api_reserve=2)  # type: ignore[call-arg]
    budget = ApiBudget(settings, sleep=lambda s: None, clock=lambda: now[0])
    bulk = DiscourseClient(httpx.Client(), settings, budget=budget, priority="bulk")
    respx.get(f"{BASE}/posts/1.json").respond(json=post_json(1))
    bulk.get_post(1)  # 5 tokens -> 4: more than the bulk floor (4) is needed
    assert bulk.at("background").priority == "background"
    waits = [budget._try(f) for f in (4, 2, 0)]  # bulk, background, answer
    assert waits[0] > 0
    assert waits[1:] == [0.0, 0.0]


# -- the reader identity (issue 32: searches never run with the bot's admin rights) --------------------


@respx.mock
def test_reader_is_anonymous_by_default_and_spends_no_admin_budget() -> None:
    """Discourse counts every request that carries an ``Api-Key`` against the site's admin bucket
    (``lib/auth/default_current_user_provider.rb``) and answers it with the key user's rights: the
    reader sends no key, so the search sees what an anonymous visitor sees."""
    settings = DiscourseSettings(base_url=BASE, api_key="k-123", api_username="citebot")  # type: ignore[arg-type, call-arg]
    budget = ApiBudget(settings)
    taken: list[str] = []
    budget.acquire = lambda priority: taken.append(priority) or 0.0  # type: ignore[method-assign, func-returns-value]
    bot = DiscourseClient(httpx.Client(), settings, budget=budget)
    reader = bot.reader()
    route = respx.get(f"{BASE}/search.json").respond(json={"posts": [], "topics": []})
    assert reader.search("shader precision") == []
    request = route.calls.last.request
    assert "Api-Key" not in request.headers
    assert "Api-Username" not in request.headers
    assert reader.identity == "anonymous"
    assert taken == []
    bot.search("shader precision")  # the bot's own call still takes its token
    assert taken == ["answer"]
    assert route.calls.last.request.headers["Api-Username"] == "citebot"


@respx.mock
def test_reader_anonymous_429_fails_the_call_without_pausing_the_admin_budget() -> None:
    settings = DiscourseSettings(base_url=BASE, api_key="k-123", api_username="citebot")  # type: ignore[arg-type, call-arg]
    budget = ApiBudget(settings)
    paused: list[float] = []
    budget.pause = paused.append  # type: ignore[method-assign, assignment]
    reader = DiscourseClient(httpx.Client(), settings, budget=budget).reader()
    respx.get(f"{BASE}/search.json").respond(
        429, headers={"Retry-After": "30"}, json={"errors": ["slow down"], "error_type": "rate_limit"}
    )
    with pytest.raises(RateLimitedError):
        reader.search("shader precision")
    assert paused == []


@respx.mock
def test_reader_member_acts_through_the_key_as_that_member() -> None:
    settings = DiscourseSettings(  # type: ignore[call-arg]
        base_url=BASE,
        api_key="k-123",  # type: ignore[arg-type]
        api_username="citebot",
        reader_username="plain_member",
    )
    reader = DiscourseClient(httpx.Client(), settings).reader()
    route = respx.get(f"{BASE}/t/7.json").respond(json={"id": 7, "title": "t", "post_stream": {"posts": []}})
    reader.get_topic(7)
    request = route.calls.last.request
    assert request.headers["Api-Key"] == "k-123"
    assert request.headers["Api-Username"] == "plain_member"
    assert reader.at("background").identity == "plain_member"


@pytest.mark.parametrize("name", ["citebot", "CiteBot", "forumbot"])
def test_the_reader_may_not_be_the_bot(name: str) -> None:
    with pytest.raises(ValueError, match="reader_username must not be the bot"):
        DiscourseSettings(  # type: ignore[call-arg]
            base_url=BASE, api_username="citebot", bot_username="forumbot", reader_username=name
        )
