"""The ``db`` source against a database with Discourse's own table and column names and types."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from backfill.run import BackfillOptions, run_backfill
from backfill.sources.db import DbSource
from tests.backfill.conftest import recorded_categories
from worker.settings import DatabaseSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration
SCHEMA = Path(__file__).with_name("discourse_schema.sql")


@pytest.fixture
def discourse(empty_db_url: str) -> str:
    """A small forum in Discourse's schema: what each eligibility rule must keep out is in it."""
    with psycopg.connect(empty_db_url) as conn:
        conn.execute(SCHEMA.read_bytes())
        conn.execute(
            """INSERT INTO users (id, username, username_lower) VALUES
                (1, 'alice', 'alice'), (2, 'bob', 'bob');
            INSERT INTO categories (id, name, slug, read_restricted, parent_category_id) VALUES
                (1, 'Support', 'support', false, NULL), (2, 'Staff', 'staff', true, NULL),
                (3, 'Staff notes', 'notes', false, 2);
            INSERT INTO topics (id, title, slug, category_id, archetype, visible, deleted_at) VALUES
                (10, 'Shadows flicker', 'shadows-flicker', 1, 'regular', true, NULL),
                (11, 'Private chat', 'private-chat', NULL, 'private_message', true, NULL),
                (12, 'Staff only', 'staff-only', 2, 'regular', true, NULL),
                (13, 'Unlisted', 'unlisted', 1, 'regular', false, NULL),
                (14, 'Deleted topic', 'deleted-topic', 1, 'regular', true, now()),
                (15, 'Sub of staff', 'sub-of-staff', 3, 'regular', true, NULL);
            INSERT INTO tags (id, name) VALUES (1, 'rendering'), (2, 'bug'), (3, 'escalated'), (4, 'triaged');
            INSERT INTO topic_tags (topic_id, tag_id) VALUES (10, 2), (10, 1), (10, 3), (10, 4);
            -- 'escalated': staff only (group 3); 'triaged': staff can tag, everyone may see (group 0
            -- read-only); 'bug' also sits in a permissionless group (everyone, as Discourse shows it).
            INSERT INTO tag_groups (id, name) VALUES (1, 'Staff tags'), (2, 'Workflow'), (3, 'Kinds');
            INSERT INTO tag_group_memberships (tag_id, tag_group_id) VALUES (3, 1), (4, 2), (2, 3);
            INSERT INTO tag_group_permissions (tag_group_id, group_id, permission_type) VALUES
                (1, 3, 1), (2, 3, 1), (2, 0, 3);
            INSERT INTO posts (id, user_id, topic_id, post_number, raw, cooked, post_type, hidden,
                               user_deleted, deleted_at, reply_to_post_number, updated_at) VALUES
                (1, 1, 10, 1, 'Shadows flicker', '<p>Shadows flicker &amp; shimmer</p>', 1, false, false,
                 NULL, NULL, '2024-03-01 12:00:00'),
                (2, 2, 10, 2, 'Raise the bias', '<p>Raise the depth bias</p>', 1, false, false, NULL, 1,
                 '2024-03-02 12:00:00'),
                (3, 2, 10, 3, 'x', '<p>closed the topic</p>', 3, false, false, NULL, NULL, now()),
                (4, 2, 10, 4, 'x', '<p>whisper</p>', 4, false, false, NULL, NULL, now()),
                (5, 2, 10, 5, 'x', '<p>flagged</p>', 1, true, false, NULL, NULL, now()),
                (6, 2, 10, 6, 'x', '<p>gone</p>', 1, false, false, now(), NULL, now()),
                (7, 2, 10, 7, 'x', '<p>(post deleted by author)</p>', 1, false, true, NULL, NULL, now()),
                (8, 1, 11, 1, 'x', '<p>pm</p>', 1, false, false, NULL, NULL, now()),
                (9, 1, 12, 1, 'x', '<p>staff</p>', 1, false, false, NULL, NULL, now()),
                (10, 1, 13, 1, 'x', '<p>unlisted</p>', 1, false, false, NULL, NULL, now()),
                (11, 1, 14, 1, 'x', '<p>in deleted topic</p>', 1, false, false, NULL, NULL, now()),
                (12, 1, 15, 1, 'x', '<p>in a subcategory of staff</p>', 1, false, false, NULL, NULL, now()),
                (13, 1, 10, 8, 'Only raw here', '', 1, false, false, NULL, NULL, now());"""
        )
    return empty_db_url


def test_db_source_reads_pages_with_eligibility_decided_in_sql(discourse: str) -> None:
    source = DbSource(discourse)
    try:
        batches = list(source.read(None, batch_size=5))
        assert source.estimate(None) == 13
        assert source.estimate(10) == 3
        listed = source.categories()
        assert listed is not None
        assert listed.complete  # the replica's table: every category
        assert {c.id: (c.read_restricted, c.parent_id) for c in listed.categories} == {
            1: (False, None),
            2: (True, None),
            3: (False, 2),
        }
    finally:
        source.close()
    assert [(b.lo, b.hi) for b in batches] == [(1, 5), (6, 10), (11, 13)]
    posts = {p.post_id: p for b in batches for p in b.posts}
    first = posts[1]
    assert (first.topic_title, first.topic_slug, first.category_name, first.tags) == (
        "Shadows flicker",
        "shadows-flicker",
        "Support",
        ("bug", "rendering", "triaged"),  # 'escalated' is staff only: never embedded
    )
    assert (first.username, first.updated_at) == ("alice", "2024-03-01T12:00:00+00:00")
    assert posts[2].reply_to_post_number == 1
    assert posts[9].cooked == ""  # ineligible rows come without their text
    assert posts[9].category_read_restricted
    assert posts[12].category_read_restricted  # restricted through its parent category
    assert posts[13].raw == "Only raw here"


def test_backfill_from_the_replica_indexes_only_eligible_posts(discourse: str, db_url: str) -> None:
    embedder = FakeEmbedder(model="test-model")
    source = DbSource(discourse)
    options = BackfillOptions(page_size=4, batch_size=2, progress=False)
    try:
        summary = run_backfill(DatabaseSettings(url=db_url), source, embedder, options)  # type: ignore[call-arg]
    finally:
        source.close()
    assert summary.seen == 13
    assert summary.reasons == {
        "post_type": 2,
        "hidden": 1,
        "deleted": 2,
        "private_message": 1,
        "restricted": 2,
        "unlisted": 1,
        "topic_deleted": 1,
    }
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT post_id, text, tags FROM post_index ORDER BY post_id").fetchall()
    assert [r[0] for r in rows] == [1, 2, 13]
    assert (
        rows[0][1]
        == "Shadows flicker\nCategory: Support\nTags: bug, rendering, triaged\n\nShadows flicker & shimmer"
    )
    assert rows[0][2] == ["bug", "rendering", "triaged"]
    assert rows[2][1].endswith("Only raw here")
    assert recorded_categories(db_url) == {
        1: ("Support", False),
        2: ("Staff", True),
        3: ("Staff notes", False),
    }


def test_db_source_refuses_a_non_postgres_url() -> None:
    from worker.errors import ConfigError

    with pytest.raises(ConfigError, match="postgresql://"):
        DbSource("mysql://x")


@pytest.mark.parametrize("storage", ["table", "custom_field", "no_plugin"])
def test_the_replica_marks_the_solved_plugins_accepted_answers_when_asked(
    discourse: str, storage: str
) -> None:
    # discourse-solved keeps them in discourse_solved_solved_topics since 2025, in the topic custom
    # field accepted_answer_post_id before (its migration 20250318024953 copies one into the other)
    with psycopg.connect(discourse) as conn:
        if storage == "table":
            conn.execute(
                "CREATE TABLE discourse_solved_solved_topics (id bigserial PRIMARY KEY,"
                " topic_id integer NOT NULL, answer_post_id integer NOT NULL,"
                " accepter_user_id integer NOT NULL, topic_timer_id integer,"
                " created_at timestamp NOT NULL DEFAULT now(), updated_at timestamp NOT NULL DEFAULT now());"
                "INSERT INTO discourse_solved_solved_topics (topic_id, answer_post_id, accepter_user_id)"
                " VALUES (10, 2, 1)"
            )
        if storage in ("table", "custom_field"):
            conn.execute(
                "CREATE TABLE topic_custom_fields (id serial PRIMARY KEY, topic_id integer NOT NULL,"
                " name varchar(256) NOT NULL, value text, created_at timestamp NOT NULL DEFAULT now(),"
                " updated_at timestamp NOT NULL DEFAULT now())"
            )
        if storage == "custom_field":
            conn.execute(
                "INSERT INTO topic_custom_fields (topic_id, name, value)"
                " VALUES (10, 'accepted_answer_post_id', '2')"
            )
    for accepted in (False, True):
        source = DbSource(discourse, accepted=accepted)
        try:
            marked = {
                p.post_id for b in source.read(None, batch_size=5) for p in b.posts if p.accepted_answer
            }
        finally:
            source.close()
        assert marked == ({2} if accepted and storage != "no_plugin" else set())
