"""The API source reads Discourse through the bot's one REST client (``DiscourseClient``): one place
sends the key, maps the errors and pauses the site-wide API budget on a 429."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import respx

from backfill.sources.api import ApiSource
from worker.budget import ApiBudget
from worker.settings import DiscourseSettings

BASE = "http://forum.test"
ROOT = Path(__file__).resolve().parents[2]


def _source(paused: list[float], taken: list[str]) -> ApiSource:
    settings = DiscourseSettings(base_url=BASE, api_key="k-123", api_username="citebot")  # type: ignore[arg-type, call-arg]
    budget = ApiBudget(settings, sleep=lambda s: None)
    budget.pause = paused.append  # type: ignore[method-assign, assignment]
    budget.acquire = lambda priority: taken.append(priority) or 0.0  # type: ignore[method-assign, func-returns-value]
    return ApiSource(httpx.Client(), settings, budget=budget, sleep=lambda s: None)


@respx.mock
def test_a_429_pauses_the_budget_once_and_the_read_is_retried() -> None:
    paused: list[float] = []
    taken: list[str] = []
    route = respx.get(f"{BASE}/site.json")
    route.side_effect = [
        httpx.Response(429, headers={"Retry-After": "7"}, json={"errors": ["slow down"]}),
        httpx.Response(200, json={"categories": [{"id": 5, "name": "Staff", "read_restricted": True}]}),
    ]
    source = _source(paused, taken)
    listed = source.categories()
    assert listed is not None
    assert [c.id for c in listed.categories] == [5]
    assert paused == [7.0]  # one pause, by the client, for the server's wait
    assert taken == ["bulk", "bulk"]  # each try takes a token at the lowest priority
    request = route.calls.last.request
    assert request.headers["Api-Key"] == "k-123"
    assert request.headers["Api-Username"] == "citebot"


@respx.mock
def test_latest_posts_are_read_through_the_client() -> None:
    respx.get(f"{BASE}/posts.json").respond(json={"latest_posts": []})
    assert list(_source([], []).read(None, batch_size=50)) == []


@pytest.mark.parametrize("needle", [r"\.pause\(", r"[\"']Api-Key[\"']"])
def test_only_the_rest_client_pauses_the_budget_and_sends_the_key(needle: str) -> None:
    """Production code outside ``worker/clients/discourse.py`` (and the budget itself) neither pauses
    the API budget nor builds Discourse's auth headers."""
    allowed = {"worker/clients/discourse.py", "worker/budget.py"}
    found = {
        str(path.relative_to(ROOT))
        for package in ("worker", "backfill", "gate", "sanitizer")
        for path in (ROOT / package).rglob("*.py")
        if re.search(needle, path.read_text(encoding="utf-8"))
    }
    assert found <= allowed
