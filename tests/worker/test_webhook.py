from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_lib
import redis.asyncio as aredis_lib
from starlette.testclient import TestClient

from tests.conftest import REDIS_NAMESPACE, RedisClients, make_settings
from tests.worker.webhook_support import SECRET, FakeIntake, encode, headers, post_payload
from worker.app.webhook import create_app
from worker.webhook_events import WEBHOOK_PATH

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


def deliver(
    client: TestClient, payload: object, event: str = "post_created", **kw: str
) -> tuple[int, dict[str, object]]:
    body = encode(payload)
    response = client.post(WEBHOOK_PATH, content=body, headers={**headers(body, event), **kw})
    return response.status_code, response.json()


def test_addressed_post_is_enqueued_once_even_when_redelivered(
    client: TestClient, intake: FakeIntake
) -> None:
    payload = post_payload()
    post = payload["post"]
    assert isinstance(post, dict)
    for _ in range(3):
        status, _body = deliver(client, payload)
        assert status == 200
    assert intake.questions == [(post["id"], 77, 1)]
    metrics = client.get("/metrics").text
    assert 'citebot_webhook_deliveries_total{outcome="enqueued"} 1.0' in metrics
    assert 'citebot_webhook_deliveries_total{outcome="duplicate"} 2.0' in metrics
    assert "citebot_webhook_ack_seconds_count 3.0" in metrics


def test_a_new_version_is_a_new_delivery(client: TestClient, intake: FakeIntake) -> None:
    payload = post_payload()
    deliver(client, payload)
    post = payload["post"]
    assert isinstance(post, dict)
    post["version"] = 2
    deliver(client, payload, event="post_edited")
    assert [q[2] for q in intake.questions] == [1, 2]


@pytest.mark.parametrize(
    "fields",
    [
        {"raw": "no mention here"},
        {"raw": "`@citebot` in code"},
        {"user_id": -1},
        {"username": "citebot"},
        {"post_type": 4},
        {"hidden": True},
        {"deleted_at": "2024-05-01T10:00:00Z"},
    ],
)
def test_unaddressed_or_loop_posts_are_acked_not_enqueued(
    client: TestClient, intake: FakeIntake, fields: dict[str, object]
) -> None:
    status, body = deliver(client, post_payload(**fields))
    assert status == 200
    assert body["outcome"] != "enqueued"
    assert intake.questions == []


def test_the_cooked_html_decides_who_is_mentioned(client: TestClient, intake: FakeIntake) -> None:
    mention = '<a class="mention" href="/u/citebot">@citebot</a>'
    quoted = f'<aside class="quote no-group"><blockquote><p>{mention} said</p></blockquote></aside><p>ok</p>'
    status, body = deliver(client, post_payload(raw="@citebot said", cooked=quoted))
    assert (status, body["outcome"], intake.questions) == (200, "not_addressed", [])
    status, body = deliver(client, post_payload(raw="@citebot hi", cooked=f"<p>{mention} hi</p>"))
    assert (status, body["outcome"], len(intake.questions)) == (200, "enqueued", 1)


def test_reply_to_the_bot_is_enqueued(client: TestClient, intake: FakeIntake) -> None:
    status, body = deliver(
        client, post_payload(raw="thanks, and then?", reply_to_user={"username": "citebot"})
    )
    assert (status, body["outcome"]) == (200, "enqueued")
    assert len(intake.questions) == 1


def test_signature_missing_or_wrong_is_401(client: TestClient, intake: FakeIntake) -> None:
    body = encode(post_payload())
    h = headers(body)
    del h["X-Discourse-Event-Signature"]
    assert client.post(WEBHOOK_PATH, content=body, headers=h).status_code == 401
    h = headers(body, secret="another-secret-value")
    assert client.post(WEBHOOK_PATH, content=body, headers=h).status_code == 401
    h = headers(body)
    assert client.post(WEBHOOK_PATH, content=body + b" ", headers=h).status_code == 401
    assert intake.questions == []


def test_no_secret_configured_refuses_everything(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings("postgresql://x@127.0.0.1/x", redis_url)
    intake = FakeIntake()
    app = create_app(settings, intake, aredis_lib.Redis.from_url(redis_url))
    assert "no webhook secret" in caplog.text
    body = encode(post_payload())
    with TestClient(app) as c:
        unsigned = {k: v for k, v in headers(body).items() if k != "X-Discourse-Event-Signature"}
        assert c.post(WEBHOOK_PATH, content=body, headers=unsigned).status_code == 401
        signed_with_empty = headers(body, secret="")
        assert c.post(WEBHOOK_PATH, content=body, headers=signed_with_empty).status_code == 401
    assert intake.questions == []


def test_ping_and_unknown_events(client: TestClient, intake: FakeIntake) -> None:
    body = encode({"ping": "OK"})
    assert (
        client.post(WEBHOOK_PATH, content=body, headers=headers(body, "ping", event_type="ping")).json()[
            "outcome"
        ]
        == "ping"
    )
    status, out = deliver(client, {"user": {"id": 3}}, event="user_created")
    assert (status, out["outcome"]) == (200, "unknown_event")
    assert intake.questions == []


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"post": {}}', b'{"post": {"id": "1", "topic_id": 2, "user_id": 3}}', b'{"ping":'],
)
def test_bad_bodies_are_400(client: TestClient, intake: FakeIntake, body: bytes) -> None:
    assert client.post(WEBHOOK_PATH, content=body, headers=headers(body)).status_code == 400
    assert intake.questions == []


def test_oversized_body_is_413_without_reading_it_all(client: TestClient, intake: FakeIntake) -> None:
    big = b"x" * (1_048_576 + 1)
    assert client.post(WEBHOOK_PATH, content=big, headers=headers(big)).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit applies while streaming
        for _ in range(64):
            yield b"y" * 65_536

    h = headers(b"")
    response = client.post(WEBHOOK_PATH, content=chunks(), headers=h)
    assert response.status_code == 413
    assert intake.questions == []


def test_refresh_events_reach_the_intake(client: TestClient, intake: FakeIntake) -> None:
    # Each event as Discourse sends it: a body of its own (version, deleted_at, updated_at change).
    bodies = [
        ("post_edited", {"version": 2, "updated_at": "2024-05-01T10:05:00.000Z"}),
        ("post_destroyed", {"version": 2, "deleted_at": "2024-05-01T10:06:00.000Z"}),
        ("post_recovered", {"version": 2, "updated_at": "2024-05-01T10:07:00.000Z"}),
    ]
    for event, fields in bodies:
        payload = post_payload(raw="edited text", id=4242, **fields)
        status, out = deliver(client, payload, event=event)
        assert (status, out["outcome"]) == (200, "refresh")
    status, _ = deliver(client, {"topic": {"id": 77, "title": "t"}}, event="topic_edited")
    assert status == 200
    assert intake.posts == [(4242, "post_edited"), (4242, "post_destroyed"), (4242, "post_recovered")]
    assert intake.topics == [(77, "topic_edited")]
    assert intake.questions == []


def test_quoting_reply_is_enqueued_for_the_worker_to_confirm(client: TestClient, intake: FakeIntake) -> None:
    # suppress_reply_when_quoting: a reply that quotes its parent arrives without reply_to_user.
    quoting = post_payload(
        raw='[quote="citebot, post:4, topic:1"]x[/quote]\n\nAnd on iOS?', reply_to_post_number=4
    )
    status, out = deliver(client, quoting)
    assert (status, out["outcome"]) == (200, "enqueued")
    assert intake.to_confirm == [(quoting["post"]["id"], 4)]  # type: ignore[index]
    named = post_payload(raw="thanks", reply_to_post_number=4, reply_to_user={"username": "bob"})
    assert deliver(client, named)[1]["outcome"] == "not_addressed"
    assert len(intake.questions) == 1


def test_the_bots_own_posts_cost_no_index_refresh(client: TestClient, intake: FakeIntake) -> None:
    reply = post_payload(username="citebot", raw="Here is the answer [1].")
    assert deliver(client, reply)[0] == 200
    assert intake.posts == []  # never indexed (bot author): no API calls spent reading it back
    assert intake.questions == []


def test_topic_deletion_and_recovery_refresh_the_whole_topic(client: TestClient, intake: FakeIntake) -> None:
    # Discourse deletes a topic with post_destroyed for the first post only, plus topic_destroyed.
    # Each event carries its own body (deleted_at set, then cleared), as Discourse sends them.
    gone, back = "2024-05-01T11:00:00.000Z", "2024-05-01T12:00:00.000Z"
    deleted = post_payload(post_number=1, topic_id=88, id=8801, deleted_at=gone)
    recovered = post_payload(post_number=1, topic_id=88, id=8801, updated_at=back)
    assert deliver(client, deleted, event="post_destroyed")[0] == 200
    assert deliver(client, recovered, event="post_recovered")[0] == 200
    topic = {"id": 88, "title": "Doomed topic"}
    assert deliver(client, {"topic": {**topic, "deleted_at": gone}}, event="topic_destroyed")[0] == 200
    assert deliver(client, {"topic": {**topic, "deleted_at": None}}, event="topic_recovered")[0] == 200
    later = post_payload(post_number=3, topic_id=88, deleted_at=gone)
    assert deliver(client, later, event="post_destroyed")[0] == 200
    assert intake.topics == [
        (88, "topic_destroyed"),  # from the first post's post_destroyed alone
        (88, "topic_recovered"),
        (88, "topic_destroyed"),
        (88, "topic_recovered"),
    ]
    assert intake.posts[:2] == [(8801, "post_destroyed"), (8801, "post_recovered")]


def test_the_event_header_cannot_delete_or_requeue(client: TestClient, intake: FakeIntake) -> None:
    """Issue 13: the header is not signed. Replaying a signed body under another event queues nothing,
    and only a body with deleted_at removes a post from the index."""
    payload = post_payload()
    assert deliver(client, payload)[1]["outcome"] == "enqueued"
    for event in ("post_edited", "post_destroyed", "post_recovered", "post_created"):
        status, out = deliver(client, payload, event=event)
        assert (status, out["outcome"]) == (200, "duplicate")
    assert len(intake.questions) == 1
    assert [e for _, e in intake.posts] == ["post_created"]
    deliver(client, post_payload(raw="not deleted", id=5151), event="post_destroyed")
    assert intake.posts[-1] == (5151, "post_edited")  # a refresh that fetches the post, not a removal


@pytest.mark.parametrize(
    "fields",
    [{"version": -1}, {"version": 0}, {"post_number": -3}, {"post_number": 0}, {"id": 0}, {"topic_id": -2}],
)
def test_ids_versions_and_numbers_must_be_positive(
    client: TestClient, intake: FakeIntake, fields: dict[str, object]
) -> None:
    status, out = deliver(client, post_payload(**fields))
    assert (status, out["outcome"]) == (400, "bad_request")
    assert intake.questions == intake.posts == []


def test_queue_failure_is_503_and_forgets_the_dedupe_key(client: TestClient, intake: FakeIntake) -> None:
    payload = post_payload()
    intake.fail_with = redis_lib.ConnectionError("down")
    status, _ = deliver(client, payload)
    assert status == 503
    intake.fail_with = None
    status, out = deliver(client, payload)
    assert (status, out["outcome"]) == (200, "enqueued")


def test_health_ready_and_metrics(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")


def test_readyz_is_503_when_redis_is_gone() -> None:
    settings = make_settings(
        "postgresql://x@127.0.0.1/x", "redis://127.0.0.1:1/0", discourse={"webhook_secret": SECRET}
    )
    app = create_app(
        settings, FakeIntake(), aredis_lib.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    )
    with TestClient(app) as c:
        assert c.get("/readyz").status_code == 503


def test_dedupe_keys_live_in_the_namespace_and_expire(
    client: TestClient, redis_url: str, redis_client: RedisClients
) -> None:
    payload = post_payload()
    deliver(client, payload)
    r = redis_client(redis_url)
    keys = list(r.scan_iter(match=f"{REDIS_NAMESPACE}:*-seen:*"))
    assert len(keys) == 2  # the question (post id, version) and the body's digest
    assert all(0 < r.ttl(key) <= 86_400 for key in keys)
