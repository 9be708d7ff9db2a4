"""Fixtures of the backfill tests: the 8-d counting embedder, settings, and post factories."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from backfill.run import BackfillOptions
from backfill.sources import SourcePost
from worker.settings import DatabaseSettings
from worker.testing.models import FakeEmbedder

TEST_MODEL = "test-model"


def make_post(post_id: int, topic_id: int = 1, *, text: str | None = None, **fields: object) -> SourcePost:
    """An eligible post of topic ``topic_id`` unless ``fields`` say otherwise."""
    base = SourcePost(
        post_id=post_id,
        topic_id=topic_id,
        post_number=post_id % 1000,
        topic_slug=f"topic-{topic_id}",
        topic_title=f"How to configure widget {topic_id}",
        category_id=10,
        category_name="Support",
        tags=("widgets",),
        cooked=f"<p>{text if text is not None else f'Answer number {post_id} about widgets.'}</p>",
        username="alice",
        updated_at="2024-01-01T00:00:00+00:00",
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def edited(post: SourcePost, text: str, when: str = "2024-02-01T00:00:00+00:00") -> SourcePost:
    return dataclasses.replace(post, cooked=f"<p>{text}</p>", updated_at=when)


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder(model=TEST_MODEL)


@pytest.fixture
def database(db_url: str) -> DatabaseSettings:
    return DatabaseSettings(url=db_url)  # type: ignore[call-arg]


@pytest.fixture
def options() -> BackfillOptions:
    return BackfillOptions(page_size=4, batch_size=2, concurrency=2, progress=False)


def recorded_categories(db_url: str) -> dict[int, tuple[str | None, bool | None]]:
    """The ``categories`` table (backfill.categories): id -> (name, read_restricted)."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT category_id, name, read_restricted FROM categories").fetchall()
    return {int(r[0]): (r[1], r[2]) for r in rows}
