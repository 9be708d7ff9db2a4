"""TeiReranker over a fake transport answering with TEI's real JSON and error bodies."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import httpx
import pytest

from worker.clients.tei import TeiReranker
from worker.errors import (
    ConfigError,
    PermanentError,
    RateLimitedError,
    ServiceUnavailableError,
    ValidationError,
)
from worker.protocols import Reranker
from worker.settings import RerankerSettings
from worker.testing.models import FakeReranker, overlap_logit, tei_info_body

BASE = "http://tei.test"

Handler = Callable[[httpx.Request], httpx.Response]

INFO = {
    "model_id": "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1",
    "model_sha": None,
    "model_dtype": "float32",
    "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}},
    "max_concurrent_requests": 512,
    "max_input_length": 512,
    "max_batch_tokens": 16384,
    "max_batch_requests": None,
    "max_client_batch_size": 32,
    "auto_truncate": False,
    "tokenization_workers": 4,
    "version": "1.5.0",
    "sha": None,
    "docker_label": None,
}


def score_of(text: str) -> float:
    """A logit the fake server gives each text: the number in it, minus 5."""
    return float(text.split()[-1]) - 5.0


class FakeTei:
    """TEI's /info and /rerank: scores sorted best first, like the real router."""

    def __init__(self, *, batch_limit: int = 32, info: bool = True, delay: float = 0.0) -> None:
        self.batch_limit = batch_limit
        self.info = info
        self.delay = delay
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/info":
            if not self.info:
                return httpx.Response(404, text="")
            return httpx.Response(200, json={**INFO, "max_client_batch_size": self.batch_limit})
        body = json.loads(request.content)
        texts = body["texts"]
        if len(texts) > self.batch_limit:
            err = f"batch size {len(texts)} > maximum allowed batch size {self.batch_limit}"
            return httpx.Response(422, json={"error": err, "error_type": "Validation"})
        if self.delay:
            time.sleep(self.delay)
        ranks = [{"index": i, "score": score_of(t)} for i, t in enumerate(texts)]
        if not body.get("raw_scores"):
            for r in ranks:
                r["score"] = 1 / (1 + math.exp(-r["score"]))
        ranks.sort(key=lambda r: r["score"], reverse=True)
        return httpx.Response(200, json=ranks)

    def rerank_bodies(self) -> list[dict[str, object]]:
        return [json.loads(r.content) for r in self.requests if r.url.path == "/rerank"]


def reranker(handler: Handler, **settings: object) -> TeiReranker:
    cfg = RerankerSettings(**{"base_url": BASE, **settings})  # type: ignore[arg-type]
    return TeiReranker(httpx.Client(transport=httpx.MockTransport(handler)), cfg)


def test_logits_come_back_in_input_order() -> None:
    tei = FakeTei()
    client = reranker(tei)
    texts = ["post 3", "post 9", "post 1", "post 5"]
    assert client.rerank("how?", texts) == [-2.0, 4.0, -4.0, 0.0]
    body = tei.rerank_bodies()[0]
    assert body == {"query": "how?", "texts": texts, "raw_scores": True, "truncate": True}
    assert client.name == "tei:cross-encoder/mmarco-mMiniLMv2-L12-H384-v1"
    assert isinstance(client, Reranker)


def test_splits_by_the_servers_batch_limit_from_info() -> None:
    tei = FakeTei(batch_limit=3)
    client = reranker(tei, batch_size=32)
    texts = [f"post {i}" for i in range(8)]
    assert client.rerank("q", texts) == [i - 5.0 for i in range(8)]
    assert [len(b["texts"]) for b in tei.rerank_bodies()] == [3, 3, 2]  # type: ignore[arg-type]
    assert [r.url.path for r in tei.requests].count("/info") == 1
    client.rerank("q", texts[:2])
    assert [r.url.path for r in tei.requests].count("/info") == 1  # read once


def test_without_info_it_learns_the_limit_from_the_422() -> None:
    tei = FakeTei(batch_limit=4, info=False)
    client = reranker(tei, batch_size=10)
    texts = [f"post {i}" for i in range(9)]
    assert client.rerank("q", texts) == [i - 5.0 for i in range(9)]
    assert [len(b["texts"]) for b in tei.rerank_bodies()] == [9, 4, 4, 1]  # type: ignore[arg-type]
    assert client.batch_size == 4


def test_settings_batch_size_caps_the_servers() -> None:
    tei = FakeTei(batch_limit=32)
    reranker(tei, batch_size=5).rerank("q", [f"p {i}" for i in range(7)])
    assert [len(b["texts"]) for b in tei.rerank_bodies()] == [5, 2]  # type: ignore[arg-type]


def test_no_texts_no_request() -> None:
    tei = FakeTei()
    assert reranker(tei).rerank("q", []) == []
    assert tei.requests == []


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (400, {"error": "`texts` cannot be empty", "error_type": "Empty"}, ValidationError),
        (413, {"error": "Input validation error: `inputs` must have less than 512 tokens. Given: 700",
               "error_type": "Validation"}, ValidationError),
        (422, {"error": "Input validation error: `inputs` must have less than 512 tokens. Given: 700",
               "error_type": "Validation"}, ValidationError),
        (424, {"error": "Backend error: model is not a re-ranker model", "error_type": "Backend"},
         ServiceUnavailableError),
        (429, {"error": "Model is overloaded", "error_type": "Overloaded"}, RateLimitedError),
        (503, {"error": "unhealthy", "error_type": "Unhealthy"}, ServiceUnavailableError),
    ],
)  # fmt: skip
def test_tei_errors_map_to_ours(status: int, body: dict[str, str], error: type[Exception]) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json=INFO)
        return httpx.Response(status, json=body)

    with pytest.raises(error) as info:
        reranker(respond).rerank("q", ["a"])
    assert info.value.message == body["error"]  # type: ignore[attr-defined]
    if status < 424:  # permanent errors carry TEI's error_type
        assert info.value.details == (body["error_type"],)  # type: ignore[attr-defined]


def test_plain_text_413() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(413, text="Failed to buffer the request body: length limit exceeded")

    with pytest.raises(ValidationError, match="length limit exceeded"):
        reranker(respond).rerank("q", ["a"])


def test_a_down_server_is_unavailable_within_the_deadline() -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError):
        reranker(respond).rerank("q", ["a"])
    assert time.monotonic() - started < 1.0


def test_the_deadline_covers_every_batch() -> None:
    tei = FakeTei(batch_limit=1, delay=0.15)
    client = reranker(tei, timeout_s=0.3)
    with pytest.raises(ServiceUnavailableError, match="deadline"):
        client.rerank("q", [f"p {i}" for i in range(5)])
    assert len(tei.rerank_bodies()) < 5


@pytest.mark.parametrize(
    "ranks",
    [
        [{"index": 0, "score": 1.0}],  # one text missing
        [{"index": 0, "score": 1.0}, {"index": 0, "score": 2.0}],  # duplicated index
        [{"index": 0, "score": "high"}, {"index": 1, "score": 2.0}],  # not a number
        [{"index": 0, "score": float("nan")}, {"index": 1, "score": 2.0}],
        {"ranks": []},
    ],
)
def test_malformed_answers_are_permanent(ranks: object) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(200, json=INFO)
        return httpx.Response(
            200, content=json.dumps(ranks).encode(), headers={"content-type": "application/json"}
        )

    with pytest.raises(PermanentError):
        reranker(respond).rerank("q", ["a", "b"])


def test_base_url_is_required() -> None:
    with pytest.raises(ConfigError, match="RERANKER__BASE_URL"):
        TeiReranker(httpx.Client(), RerankerSettings())  # type: ignore[call-arg]


def test_fake_reranker_scores_by_overlap_and_records() -> None:
    fake = FakeReranker(scores={"canned": 1.5})
    assert fake.rerank("shadow map bias", ["shadow map bias fix", "audio", "canned"]) == [6.0, -6.0, 1.5]
    assert overlap_logit("shadow map", "map") == 0.0
    assert fake.calls[0].texts == ("shadow map bias fix", "audio", "canned")
    fake.fail_with = ServiceUnavailableError("down", service="fake")
    with pytest.raises(ServiceUnavailableError):
        fake.rerank("q", ["a"])


@pytest.mark.parametrize("kind", ["reranker", "embedding"])
def test_the_local_servers_info_names_one_model_kind_like_tei(kind: str) -> None:
    # TEI serves one model: /info's model_type is an externally tagged enum with exactly one key.
    info = tei_info_body("some/model", kind, max_client_batch_size=7)
    assert list(info["model_type"]) == [kind]
    assert info["model_type"][kind]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=info)

    client = TeiReranker(
        httpx.Client(transport=httpx.MockTransport(handler)), RerankerSettings(base_url=BASE)
    )
    assert client.info()["model_id"] == "some/model"
    assert client.batch_size == 7
