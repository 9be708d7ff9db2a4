"""The demo's index at the start of a run (issue 16 item 7): it reuses what exports on disk own, removes
what an earlier run's forum left, and its forum serves every post the index holds."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector

from eval.demo.index import start_index
from eval.stack.forum.loader import load_export
from eval.stack.forum.store import ForumStore
from tests.eval.forum.export import TOPICS, write_export
from tests.worker.retrieval.doubles import angle_vector, insert_post

pytestmark = pytest.mark.integration


def _index(db_url: str, rows: list[tuple[int, int, int, str]]) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        register_vector(conn)
        for post_id, topic_id, number, owner in rows:
            insert_post(conn, post_id, angle_vector(post_id % 90), topic_id=topic_id, post_number=number)
            conn.execute("UPDATE post_index SET source = %s WHERE post_id = %s", (owner, post_id))


def test_a_run_reuses_exports_on_disk_removes_the_rest_and_serves_every_indexed_post(
    db_url: str, empty_db_url: str, tmp_path: Path
) -> None:
    sample = write_export(tmp_path / "sample", TOPICS[:1])  # topic 10
    bigger = write_export(tmp_path / "bigger", TOPICS)  # topics 10, 11, 12: the sample was cut from it
    _index(
        db_url,
        [
            (1001, 10, 1, f"file:{sample}"),
            (1002, 10, 2, f"file:{sample}"),
            (1102, 11, 2, f"file:{bigger}"),  # a bigger backfill someone ran by hand
            (1103, 11, 3, f"file:{bigger}"),
            (9002, 90, 2, "forum"),  # a member's post an earlier run's webhooks indexed
            (7702, 77, 2, f"file:{tmp_path / 'gone'}"),  # an export deleted since
        ],
    )
    start = start_index(db_url, sample)
    assert start.reused == {f"file:{sample}": 2, f"file:{bigger}": 2}
    assert start.removed == {"forum": 1, f"file:{tmp_path / 'gone'}": 1}
    assert start.exports == (bigger,)
    said = "\n".join(start.lines(str))
    assert f"index: reusing 2 posts of {sample}" in said
    assert "index: removed 1 posts of an earlier run's forum (members' posts its webhooks indexed)" in said
    assert f"forum: also serves {bigger}, whose posts the index holds" in said
    with psycopg.connect(db_url) as conn:
        indexed = {(int(t), int(n)) for t, n in conn.execute("SELECT topic_id, post_number FROM post_index")}
    assert indexed == {(10, 1), (10, 2), (11, 2), (11, 3)}

    store = ForumStore(empty_db_url)
    try:
        # Loaded as the demo loads it: the sample, then what the index also holds (topic 10 once).
        report = load_export(store, sample, also=start.exports)
        with store.connection() as conn:
            served = {(r["topic_id"], r["post_number"]) for r in conn.execute("SELECT * FROM forum.posts")}
    finally:
        store.close()
    assert (report.topics, report.posts) == (3, 6)
    assert indexed <= served  # no link the bot writes 404s
    assert start_index(db_url, sample).removed == {}  # a second start removes nothing more


def test_an_empty_index_says_so(db_url: str, tmp_path: Path) -> None:
    start = start_index(db_url, write_export(tmp_path / "sample", TOPICS[:1]))
    assert (start.reused, start.removed, start.exports) == ({}, {}, ())
    assert start.lines(str) == ["index: empty, the sample is embedded from scratch"]
