"""The ``file`` source on real topics of the Urho3D forum archive (/t/{id}.json exports)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import psycopg
import pytest

from backfill.run import BackfillOptions, run_backfill
from backfill.sources.file import FileSource, parse_raw
from eval.evaluation.datasets import URHO3D
from tests.backfill.conftest import recorded_categories
from tests.eval.forum.export import write_export
from tests.services import unavailable
from worker.errors import ConfigError
from worker.settings import DatabaseSettings
from worker.testing.models import FakeEmbedder

ARCHIVE = URHO3D
TOPICS = (100, 1000, 1036)  # 37 + 3 + 93 posts; 1036 holds a "posts were split" small action


@pytest.fixture
def export(tmp_path: Path) -> Path:
    if not (ARCHIVE / "topics").is_dir():
        unavailable("data", "the Urho3D archive is not on this machine")
    (tmp_path / "topics").mkdir()
    (tmp_path / "raw").mkdir()
    for tid in TOPICS:
        shutil.copy(ARCHIVE / "topics" / f"{tid}.json", tmp_path / "topics" / f"{tid}.json")
    shutil.copy(ARCHIVE / "raw" / "1000.md", tmp_path / "raw" / "1000.md")
    return tmp_path


def test_posts_come_in_ascending_id_order_across_topics_with_their_fields(export: Path) -> None:
    source = FileSource(export)
    batches = list(source.read(None, batch_size=50))
    posts = [p for b in batches for p in b.posts]
    ids = [p.post_id for p in posts]
    assert len(posts) == 133 == source.estimate(None)
    assert ids == sorted(ids)
    assert batches[0].lo == 0
    assert all(b.lo == a.hi + 1 for a, b in itertools.pairwise(batches))
    fps = next(p for p in posts if p.post_id == 5793)
    assert (fps.topic_id, fps.post_number, fps.topic_title, fps.category_id) == (
        1000,
        1,
        "Simple FPS counter",
        11,
    )
    assert fps.topic_slug == "simple-fps-counter"
    assert fps.raw is not None
    assert fps.raw.startswith("I added a simple FPS counter")
    assert fps.category_name is None  # no categories.json: no name is made up
    assert source.categories() is None  # no categories.json: the export describes none
    resumed = [p.post_id for b in source.read(ids[99], batch_size=50) for p in b.posts]
    assert resumed == ids[100:]
    assert source.estimate(ids[99]) == 33


def test_backfill_of_real_topics_indexes_eligible_posts_and_honours_categories(
    export: Path, db_url: str
) -> None:
    (export / "categories.json").write_text(
        json.dumps(
            {
                "category_list": {
                    "categories": [
                        {"id": 9, "name": "Support", "read_restricted": False},
                        {"id": 11, "name": "Staff", "read_restricted": True},
                    ]
                }
            }
        ),
        "utf-8",
    )
    embedder = FakeEmbedder(model="test-model")
    options = BackfillOptions(page_size=40, batch_size=16, progress=False)
    summary = run_backfill(DatabaseSettings(url=db_url), FileSource(export), embedder, options)  # type: ignore[call-arg]
    assert summary.seen == 133
    # Topics 1000 and 1036 are in category 11; the small action of 1036 fails on its post type first.
    assert summary.reasons["restricted"] == 3 + 92
    assert summary.reasons["post_type"] == 1
    assert summary.embedded == 133 - summary.ineligible
    with psycopg.connect(db_url) as conn:
        topics: dict[int, int] = dict(
            conn.execute("SELECT topic_id, count(*) FROM post_index GROUP BY topic_id").fetchall()
        )
        text = conn.execute("SELECT text FROM post_index WHERE post_id = 434").fetchone()
    assert topics == {100: summary.embedded}
    assert text is not None
    assert text[0].startswith("Autocompletion generator\nCategory: Support\n\n")
    assert recorded_categories(db_url) == {9: ("Support", False), 11: ("Staff", True)}


def test_missing_topics_folder_is_a_clear_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no topics/ folder"):
        FileSource(tmp_path)


def test_parse_raw_splits_posts_by_number() -> None:
    text = (
        "al | 2017-01-02 01:04:43 UTC | #1\n\nfirst\n\n-------------------------\n\nbo | x | #2\n\nsecond\n"
    )
    assert parse_raw(text) == {1: "first", 2: "second"}


def test_an_export_without_categories_is_indexed_but_cited_only_when_said_public(
    tmp_path: Path, db_url: str
) -> None:
    """Fail closed (backfill.categories): an export that describes no category leaves its categories
    unknown, so its posts are indexed but never recalled; --public-export records them as public."""
    export = write_export(tmp_path / "export")
    embedder = FakeEmbedder(model="test-model")
    options = BackfillOptions(progress=False)
    database = DatabaseSettings(url=db_url)  # type: ignore[call-arg]
    summary = run_backfill(database, FileSource(export), embedder, options)
    assert summary.embedded == 5  # topic 12's lone first post is an open question
    assert recorded_categories(db_url) == {}
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM citable_categories").fetchone() == (0,)
    run_backfill(database, FileSource(export, assume_public=True), embedder, options)
    assert recorded_categories(db_url) == {6: (None, False), 7: (None, False)}
    with psycopg.connect(db_url) as conn:
        citable = {r[0] for r in conn.execute("SELECT category_id FROM citable_categories")}
    assert citable == {6, 7}


def test_tags_of_restricted_tag_groups_are_left_out(tmp_path: Path) -> None:
    export = write_export(tmp_path / "export")
    (export / "tag_groups.json").write_text(
        json.dumps(
            {
                "tag_groups": [
                    # Current Discourse: tags as objects, permissions by group id (3 = staff).
                    {"id": 1, "name": "Staff", "tags": [{"id": 1, "name": "ui"}], "permissions": {"3": 1}},
                    {"id": 2, "name": "Open", "tags": [{"id": 2, "name": "open"}], "permissions": {}},
                ]
            }
        ),
        "utf-8",
    )
    posts = [p for b in FileSource(export).read(None, batch_size=50) for p in b.posts]
    assert {p.topic_id: p.tags for p in posts}[11] == ()  # 'ui' is staff only
