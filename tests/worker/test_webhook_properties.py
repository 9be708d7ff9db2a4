"""Property tests: whatever the body and headers, no 5xx, and nothing enqueued unless signed and addressed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis as redis_lib
import redis.asyncio as aredis_lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.conftest import REDIS_NAMESPACE, make_settings
from tests.worker.webhook_support import SECRET, FakeIntake, post_payload
from worker.addressing import BotIdentity, decide
from worker.app.webhook import create_app
from worker.webhook_events import POST_EVENTS, WEBHOOK_PATH, PostEnvelope, sign

pytestmark = pytest.mark.integration

BOT = BotIdentity("citebot")
NAMESPACE = f"{REDIS_NAMESPACE}-prop-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def harness(redis_server: str) -> Iterator[tuple[TestClient, FakeIntake]]:
    s = make_settings(
        "postgresql://x@127.0.0.1/x",
        redis_server,
        discourse={"webhook_secret": SECRET, "bot_username": "citebot"},
        redis={"url": redis_server, "namespace": NAMESPACE},
    )
    intake = FakeIntake()
    with TestClient(
        create_app(s, intake, aredis_lib.Redis.from_url(redis_server)), raise_server_exceptions=False
    ) as client:
        yield client, intake
    with redis_lib.Redis.from_url(redis_server) as r:  # module scope: redis_client is per test
        for key in r.scan_iter(match=f"{NAMESPACE}*"):
            r.delete(key)


raws = st.one_of(
    st.none(),
    st.text(max_size=200),
    st.builds(
        lambda a, b, wrap: wrap.format(a + "@citebot" + b),
        st.text(max_size=20),
        st.text(max_size=20),
        st.sampled_from(["{}", "`{}`", "```\n{}\n```", "> {}", "[quote]{}[/quote]", "\n\n    {}"]),
    ),
)
ints = st.one_of(st.integers(min_value=-5, max_value=10**6), st.integers(), st.text(max_size=3), st.none())
post_fields = st.fixed_dictionaries(
    {},
    optional={
        "id": ints,
        "topic_id": ints,
        "user_id": ints,
        "post_type": st.one_of(st.integers(min_value=0, max_value=5), st.text(max_size=2)),
        "raw": raws,
        "username": st.sampled_from(["alice", "citebot", "CITEBOT", "bob"]),
        "hidden": st.one_of(st.booleans(), st.none(), st.integers()),
        "deleted_at": st.one_of(st.none(), st.just("2024-01-01T00:00:00Z")),
        "reply_to_user": st.one_of(
            st.none(), st.fixed_dictionaries({"username": st.sampled_from(["citebot", "x"])})
        ),
        "version": st.one_of(st.integers(min_value=1, max_value=5), st.integers()),
        "topic_archetype": st.sampled_from(["regular", "private_message"]),
    },
)


def bodies() -> st.SearchStrategy[bytes]:
    structured = st.builds(lambda fields: json.dumps(post_payload(**fields)).encode(), post_fields)
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
        ),
        max_leaves=8,
    ).map(lambda v: json.dumps(v).encode())
    return st.one_of(structured, structured, structured, json_values, st.binary(max_size=300))


header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=bodies(),
    signature=st.sampled_from(["valid", "valid", "valid", "wrong", "missing", "garbage", "bare-hex"]),
    event=st.sampled_from(["post_created", "post_edited", "post_destroyed", "topic_edited", "ping", "x", ""]),
    event_type=st.sampled_from(["post", "topic", "ping", "", "user"]),
    junk=header_values,
)
def test_no_5xx_and_only_signed_addressed_posts_enqueue(
    harness: tuple[TestClient, FakeIntake],
    body: bytes,
    signature: str,
    event: str,
    event_type: str,
    junk: str,
) -> None:
    client, intake = harness
    headers = {"X-Discourse-Event": event, "X-Discourse-Event-Type": event_type, "X-Discourse-Event-Id": junk}
    if signature == "valid":
        headers["X-Discourse-Event-Signature"] = sign(SECRET.encode(), body)
    elif signature == "wrong":
        headers["X-Discourse-Event-Signature"] = sign(b"not-the-secret-at-all", body)
    elif signature == "garbage":
        headers["X-Discourse-Event-Signature"] = junk
    elif signature == "bare-hex":
        headers["X-Discourse-Event-Signature"] = sign(SECRET.encode(), body).removeprefix("sha256=")
    before = len(intake.questions)
    response = client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code < 500
    enqueued = intake.questions[before:]
    if signature != "valid":
        assert response.status_code == 401
        assert enqueued == []
        return
    if enqueued:
        assert event in POST_EVENTS  # any post event: the body, not the header, decides
        post = PostEnvelope.model_validate_json(body).post
        assert decide(post.to_domain(), BOT).addressed
        assert enqueued == [(post.id, post.topic_id, post.version)]


replay_headers = st.fixed_dictionaries(
    {
        "X-Discourse-Event": st.sampled_from(
            [
                "post_created",
                "post_edited",
                "post_destroyed",
                "post_recovered",
                "topic_edited",
                "ping",
                "x",
                "",
            ]
        ),
        "X-Discourse-Event-Type": st.sampled_from(["post", "topic", "ping", "", "user"]),
        "X-Discourse-Event-Id": header_values,
        "X-Discourse-Instance": header_values,
    },
    optional={
        "X-Discourse-Extra": header_values,
        "Content-Type": st.sampled_from(["application/json", "text/x"]),
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies(), deliveries=st.lists(replay_headers, min_size=2, max_size=5))
def test_no_header_change_without_a_new_signed_body_queues_new_work(
    harness: tuple[TestClient, FakeIntake], body: bytes, deliveries: list[dict[str, str]]
) -> None:
    """Issue 13: only the body is signed. One signed body, delivered again under any headers, queues
    work at most once: after the first delivery that queued anything, nothing more."""
    client, intake = harness
    signature = sign(SECRET.encode(), body)

    def work() -> tuple[int, int, int]:
        return len(intake.questions), len(intake.posts), len(intake.topics)

    worked = False
    for headers in deliveries:
        before = work()
        response = client.post(
            WEBHOOK_PATH, content=body, headers={**headers, "X-Discourse-Event-Signature": signature}
        )
        assert response.status_code < 500
        after = work()
        if worked:
            assert after == before, headers
        worked = worked or after != before
        # One delivery queues at most one question and one refresh.
        assert all(b - a <= 1 for a, b in zip(before, after, strict=True))
