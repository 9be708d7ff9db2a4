"""The bulk backfill on real PostgreSQL + pgvector: skip, re-embed, remove, resume, refuse, lock."""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
import threading

import psycopg
import pytest

from backfill.lock import BackfillBusyError, BackfillLock
from backfill.run import BackfillInterrupted, BackfillOptions, run_backfill
from backfill.sources import SourcePost
from backfill.sources.memory import MemorySource
from tests.backfill.conftest import TEST_MODEL, edited, make_post, recorded_categories
from worker.errors import IndexMismatchError
from worker.settings import DatabaseSettings
from worker.testing.models import FakeEmbedder

pytestmark = pytest.mark.integration


def indexed(db_url: str) -> dict[int, str]:
    with psycopg.connect(db_url) as conn:
        return dict(conn.execute("SELECT post_id, text FROM post_index ORDER BY post_id").fetchall())


def corpus(n: int = 10) -> list[SourcePost]:
    return [make_post(i, topic_id=1 + i // 4) for i in range(1, n + 1)]


def test_first_run_embeds_every_eligible_post_and_builds_the_index(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    posts = [*corpus(10), make_post(11, post_type=3), make_post(12, hidden=True)]
    summary = run_backfill(database, MemorySource(posts), embedder, options)
    assert (summary.status, summary.seen, summary.embedded, summary.ineligible) == ("done", 12, 10, 2)
    assert summary.reasons == {"post_type": 1, "hidden": 1}
    assert embedder.texts_embedded == 10
    rows = indexed(db_url)
    assert sorted(rows) == list(range(1, 11))
    head = "How to configure widget 1\nCategory: Support\nTags: widgets\n\nAnswer number 3"
    assert rows[3].startswith(head)
    with psycopg.connect(db_url) as conn:
        valid = conn.execute(
            "SELECT indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'post_index_embedding_hnsw'"
        ).fetchone()
        state = conn.execute("SELECT status, cursor, stats FROM backfill_state").fetchone()
    assert valid == (True,)
    assert state is not None
    assert state[0] == "done"
    assert state[1] == {}
    assert state[2]["embedded"] == 10


def test_second_run_on_unchanged_source_calls_the_embedder_zero_times(
    database: DatabaseSettings, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource([*corpus(10), make_post(11, hidden=True), make_post(12, post_type=2)])
    run_backfill(database, source, embedder, options)
    calls = len(embedder.calls)
    again = run_backfill(database, source, embedder, options)
    assert len(embedder.calls) == calls
    assert (again.seen, again.embedded, again.skipped, again.removed) == (12, 0, 10, 0)
    assert again.index_build_s == 0  # the live index was kept, not dropped and rebuilt


def test_edited_post_is_re_embedded_and_deleted_one_removed(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    posts = corpus(10)
    run_backfill(database, MemorySource(posts), embedder, options)
    embedder.calls.clear()
    posts[4] = edited(posts[4], "A completely new answer")  # post 5
    posts[6] = dataclasses.replace(posts[6], deleted=True)  # post 7 soft-deleted
    del posts[8]  # post 9 hard-deleted: gone from the source
    summary = run_backfill(database, MemorySource(posts), embedder, options)
    assert [t for call in embedder.calls for t in call.texts] == [indexed(db_url)[5]]
    assert "A completely new answer" in indexed(db_url)[5]
    assert (summary.embedded, summary.removed) == (1, 2)
    assert 7 not in indexed(db_url)
    assert 9 not in indexed(db_url)


def test_a_backfill_removes_only_what_its_own_source_no_longer_has(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    full = corpus(30)
    run_backfill(database, MemorySource(full, key="file:/exports/full"), embedder, options)
    sample = [p for p in full if p.post_id % 10 == 0]  # a smaller export: the same ids, a few of them
    summary = run_backfill(database, MemorySource(sample, key="file:/exports/sample"), embedder, options)
    assert summary.removed == 0  # today's main: 27 (every post of the full export in the sample's range)
    assert sorted(indexed(db_url)) == list(range(1, 31))
    # What the sample read it owns; a post it no longer has goes, the full export's posts stay.
    smaller = [sample[0], sample[2]]  # post 20 gone from the sample
    again = run_backfill(database, MemorySource(smaller, key="file:/exports/sample"), embedder, options)
    assert (again.removed, set(range(1, 31)) - set(indexed(db_url))) == (1, {20})
    # The live forum's rows (db, api, webhooks) are one owner; an export never sweeps them.
    run_backfill(database, MemorySource(full[:5], key="db"), embedder, options)
    rest = run_backfill(database, MemorySource(full[5:], key="file:/exports/full"), embedder, options)
    assert rest.removed == 0
    assert {1, 2, 3, 4, 5} <= set(indexed(db_url))
    # --prune: the range sweep removes what the source lacks, whoever wrote it.
    pruned = run_backfill(
        database,
        MemorySource(smaller, key="file:/exports/sample"),
        embedder,
        dataclasses.replace(options, prune=True),
    )
    assert sorted(indexed(db_url)) == [10, 30]
    assert pruned.removed == 28


def test_an_anonymized_author_is_rewritten_by_the_next_run_without_an_embedding(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    posts = corpus(8)
    run_backfill(database, MemorySource(posts), embedder, options)
    calls = len(embedder.calls)
    # UserAnonymizer: the same posts, another username; their text (hence the digest) is unchanged.
    anonymized = [dataclasses.replace(p, username="anon4417") if p.post_id % 2 else p for p in posts]
    summary = run_backfill(database, MemorySource(anonymized), embedder, options)
    assert (summary.embedded, summary.skipped, summary.rewritten) == (0, 8, 4)
    assert "4 rewritten" in summary.line()
    assert len(embedder.calls) == calls
    with psycopg.connect(db_url) as conn:
        names = dict(conn.execute("SELECT post_id, username FROM post_index").fetchall())
    assert {pid for pid, name in names.items() if name == "anon4417"} == {1, 3, 5, 7}


def test_post_moved_into_a_restricted_category_disappears_from_recall(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    posts = corpus(8)
    run_backfill(database, MemorySource(posts, restricted=frozenset({99})), embedder, options)
    moved = [dataclasses.replace(p, category_id=99) if p.topic_id == 2 else p for p in posts]
    summary = run_backfill(database, MemorySource(moved, restricted=frozenset({99})), embedder, options)
    gone = {p.post_id for p in posts if p.topic_id == 2}
    assert summary.removed == len(gone)
    assert summary.reasons == {"restricted": len(gone)}
    query = embedder.embed([indexed(db_url)[min(gone - {0}) - 1]])[0]
    with psycopg.connect(db_url) as conn:
        hits = conn.execute(
            "SELECT post_id FROM post_index ORDER BY embedding <=> %s::halfvec LIMIT 25", (str(query),)
        ).fetchall()
    assert recorded_categories(db_url)[99] == ("Support", True)
    assert gone.isdisjoint(r[0] for r in hits)
    assert len(hits) == 8 - len(gone)


def test_model_change_without_reindex_is_refused_and_reindex_rebuilds(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(6))
    run_backfill(database, source, embedder, options)
    other = FakeEmbedder(model="other-model", dimension=16)
    with pytest.raises(IndexMismatchError) as info:
        run_backfill(database, source, other, options)
    assert "--reindex" in str(info.value)
    assert "other-model" in str(info.value)
    assert other.calls == []
    summary = run_backfill(database, source, other, dataclasses.replace(options, reindex=True))
    assert summary.embedded == 6
    assert other.texts_embedded == 6
    with psycopg.connect(db_url) as conn:
        meta = conn.execute("SELECT model, dimension FROM index_meta").fetchone()
        sql = "SELECT DISTINCT vector_dims(embedding::vector), model FROM post_index"
        dims = conn.execute(sql).fetchall()
    assert meta == ("other-model", 16)
    assert dims == [(16, "other-model")]


class Interrupting(FakeEmbedder):
    """Raises KeyboardInterrupt on its n-th call, like Ctrl-C in the middle of a run."""

    def __init__(self, at_call: int) -> None:
        super().__init__(model=TEST_MODEL)
        self.at_call = at_call
        self.attempts = 0

    def embed_array(self, texts):  # type: ignore[no-untyped-def]
        self.attempts += 1
        if self.attempts == self.at_call:
            raise KeyboardInterrupt
        return super().embed_array(texts)


def test_resume_after_an_interruption_embeds_nothing_twice(
    database: DatabaseSettings, db_url: str, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(20))
    first = Interrupting(at_call=5)
    with pytest.raises(BackfillInterrupted) as info:  # a KeyboardInterrupt that carries the summary
        run_backfill(database, source, first, options)
    assert info.value.summary.status == "interrupted"
    assert info.value.summary.seen >= 4
    with psycopg.connect(db_url) as conn:
        state = conn.execute("SELECT status, cursor, stats FROM backfill_state").fetchone()
    assert state is not None
    assert state[0] == "interrupted"  # not "failed": nothing went wrong, and the same command resumes
    assert state[1]["post_id"] >= 4
    assert state[2]["status"] == "interrupted"
    second = FakeEmbedder(model=TEST_MODEL)
    summary = run_backfill(database, source, second, options)
    assert summary.resumed_from == state[1]["post_id"]
    first_texts = [t for call in first.calls for t in call.texts]
    second_texts = [t for call in second.calls for t in call.texts]
    assert not set(first_texts) & set(second_texts)
    assert len(first_texts) + len(second_texts) == 20
    assert sorted(indexed(db_url)) == list(range(1, 21))


def test_limit_stops_early_and_the_next_run_continues(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(10))
    first = run_backfill(database, source, embedder, dataclasses.replace(options, limit=6))
    assert (first.status, first.seen) == ("idle", 6)
    assert sorted(indexed(db_url)) == list(range(1, 7))
    rest = run_backfill(database, source, embedder, options)
    assert (rest.status, rest.seen, rest.resumed_from) == ("done", 4, 6)
    assert embedder.texts_embedded == 10


def test_a_second_run_of_the_same_source_is_refused_while_one_holds_the_lock(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(4))
    run_backfill(database, source, embedder, dataclasses.replace(options, limit=1))  # a live index
    refused = FakeEmbedder(model=TEST_MODEL)
    with BackfillLock(db_url, source.key), pytest.raises(BackfillBusyError) as info:
        run_backfill(database, source, refused, options)
    assert "another backfill of source 'memory' is running" in str(info.value)
    assert refused.calls == []
    assert sorted(indexed(db_url)) == [1]
    # A bulk load (or a reindex) runs alone: it drops the vector index that other runs write into.
    for bulk in (dataclasses.replace(options, reindex=True), dataclasses.replace(options, bulk=True)):
        with BackfillLock(db_url, "file:/x"), pytest.raises(BackfillBusyError, match="a backfill is running"):
            run_backfill(database, source, refused, bulk)
    with BackfillLock(db_url, "file:/x", exclusive=True), pytest.raises(BackfillBusyError, match="bulk"):
        run_backfill(database, source, refused, options)
    assert refused.calls == []


class Slow(FakeEmbedder):
    def __init__(self, gate: threading.Event) -> None:
        super().__init__(model=TEST_MODEL)
        self.gate = gate

    def embed_array(self, texts):  # type: ignore[no-untyped-def]
        self.gate.wait(10)
        return super().embed_array(texts)


def test_two_concurrent_runs_never_duplicate(
    database: DatabaseSettings, db_url: str, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(12))
    gate = threading.Event()
    slow = Slow(gate)
    results: list[object] = []
    thread = threading.Thread(target=lambda: results.append(run_backfill(database, source, slow, options)))
    thread.start()
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:  # wait until the first run holds its lock
            for _ in range(200):
                held = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
                if held and held[0]:
                    break
                threading.Event().wait(0.05)
        second = FakeEmbedder(model=TEST_MODEL)
        with pytest.raises(BackfillBusyError):
            run_backfill(database, source, second, options)
        assert second.calls == []
    finally:
        gate.set()
        thread.join(30)
    assert len(results) == 1
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT post_id) FROM post_index").fetchone()
    assert row == (12, 12)


def test_pages_written_on_two_connections_commit_in_source_order(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    """Two writers hold pages in flight at once; each checkpoint is committed after the page before it,
    so the recorded cursors only go up (a trigger logs every checkpoint in commit order)."""
    with psycopg.connect(db_url) as conn:
        conn.execute("CREATE TABLE checkpoints (n serial, post_id bigint)")
        conn.execute(
            "CREATE FUNCTION log_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.cursor ? 'post_id' THEN INSERT INTO checkpoints (post_id) "
            "VALUES ((NEW.cursor->>'post_id')::bigint); END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER log_checkpoint AFTER UPDATE ON backfill_state "
            "FOR EACH ROW EXECUTE FUNCTION log_checkpoint()"
        )
    summary = run_backfill(
        database, MemorySource(corpus(40)), embedder, dataclasses.replace(options, writers=2)
    )
    assert (summary.status, summary.embedded) == ("done", 40)
    with psycopg.connect(db_url) as conn:
        cursors = [r[0] for r in conn.execute("SELECT post_id FROM checkpoints ORDER BY n").fetchall()]
    assert cursors == list(range(4, 41, 4))
    assert sorted(indexed(db_url)) == list(range(1, 41))


def test_a_page_that_fails_to_write_stops_the_pages_after_it(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    """The page after a failed one was written meanwhile on the other connection: it is rolled back with
    it, so the checkpoint stays before the failed page and nothing after it is committed."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_7() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.post_id = 7 THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_7 BEFORE INSERT ON post_index FOR EACH ROW EXECUTE FUNCTION refuse_7()"
        )
    with pytest.raises(psycopg.errors.RaiseException):
        run_backfill(database, MemorySource(corpus(20)), embedder, dataclasses.replace(options, writers=2))
    assert sorted(indexed(db_url)) == [1, 2, 3, 4]
    with psycopg.connect(db_url) as conn:
        state = conn.execute("SELECT status, cursor FROM backfill_state").fetchone()
    assert state == ("failed", {"post_id": 4})


def test_fresh_page_falls_back_to_the_upsert_when_a_row_appeared_meanwhile(db_url: str) -> None:
    from backfill.prepare import Preparer, Truncator
    from backfill.store import IndexStore
    from worker.db.connect import connect

    preparer = Preparer(TEST_MODEL, Truncator(256))
    prepared = [preparer.prepare(make_post(i)) for i in (1, 2, 3)]
    posts = [p for p in prepared if not isinstance(p, str)]
    embedder = FakeEmbedder(model=TEST_MODEL)
    vectors = embedder.embed_array([p.text for p in posts])
    with connect(DatabaseSettings(url=db_url)) as conn:  # type: ignore[call-arg]
        store = IndexStore(conn, TEST_MODEL)
        # A webhook indexes post 2 after the page [1, 3] was read as empty ("fresh").
        store.write_batch(
            posts[1:2],
            vectors[1:2],
            lo=2,
            hi=2,
            keep=[2],
            source_key="s",
            cursor=None,
            stats={"removed": 0.0},
        )
        store.write_batch(
            posts, vectors, lo=1, hi=3, keep=[1, 2, 3], source_key="s", cursor=None, stats={"removed": 0.0},
            fresh=True,
        )  # fmt: skip
    assert sorted(indexed(db_url)) == [1, 2, 3]


def test_a_bulk_load_into_a_live_table_rebuilds_the_index_concurrently(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(12))
    run_backfill(database, source, embedder, dataclasses.replace(options, limit=2))
    summary = run_backfill(database, source, embedder, dataclasses.replace(options, bulk=True))
    assert (summary.bulk, summary.index_build_s > 0) == (True, True)
    with psycopg.connect(db_url) as conn:
        valid = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'post_index_embedding_hnsw'"
        ).fetchone()
    assert valid == (True,)
    assert len(indexed(db_url)) == 12


def _index_oid(db_url: str) -> int | None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT to_regclass('post_index_embedding_hnsw')::oid").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def test_a_small_run_updates_the_live_index_in_place(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    source = MemorySource(corpus(60))
    run_backfill(database, source, embedder, dataclasses.replace(options, limit=10))
    before = _index_oid(db_url)
    assert before is not None
    small = run_backfill(database, source, embedder, dataclasses.replace(options, limit=5))
    assert (small.seen, small.index_build_s) == (5, 0)
    assert _index_oid(db_url) == before
    assert len(indexed(db_url)) == 15
    # 45 posts left, three times the table: still written in place, never dropped without --bulk.
    rest = run_backfill(database, source, embedder, options)
    assert (rest.seen, rest.bulk, rest.index_build_s) == (45, False, 0)
    assert _index_oid(db_url) == before
    # Only an explicit bulk load drops it, and builds it again once, concurrently.
    bulk = run_backfill(database, source, embedder, dataclasses.replace(options, bulk=True))
    assert bulk.index_build_s > 0
    assert _index_oid(db_url) not in (None, before)


def test_progress_moves_per_embedding_batch_with_rate_and_eta(
    database: DatabaseSettings, embedder: FakeEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="backfill.progress")
    one_page = BackfillOptions(
        page_size=1000, batch_size=2, concurrency=2, progress=False, progress_every_s=0
    )
    run_backfill(database, MemorySource([*corpus(20), make_post(21, hidden=True)]), embedder, one_page)
    lines = [r.getMessage() for r in caplog.records if r.name == "backfill.progress"]
    assert lines, "no progress line"
    assert "posts/s, ETA" in lines[0]
    done = sorted(int(re.search(r" (\d+)/21 posts", line).group(1)) for line in lines)  # type: ignore[union-attr]
    # One page of 21 posts: the ineligible one as soon as it is read, then one step per batch of 2.
    assert done == [1, *range(3, 22, 2)]


def test_limit_cuts_a_page_keeping_its_coverage_in_both_directions() -> None:
    from backfill.run import _cut
    from backfill.sources import SourceBatch

    up = SourceBatch(tuple(make_post(i) for i in (5, 6, 7)), lo=3, hi=7, cursor=7)
    assert (lambda b: (b.lo, b.hi, b.cursor, len(b.posts)))(_cut(up, 2)) == (3, 6, 6, 2)
    down = SourceBatch(tuple(make_post(i) for i in (9, 8, 7)), lo=7, hi=12, cursor=7)
    assert (lambda b: (b.lo, b.hi, b.cursor, len(b.posts)))(_cut(down, 2)) == (8, 12, 8, 2)


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"CITEBOT_DATABASE__URL": db_url, "CITEBOT_EMBEDDINGS__MODEL": TEST_MODEL}
    return subprocess.run(
        [sys.executable, "-m", "worker.app.cli", *args],
        env={**env, "CITEBOT_EMBEDDINGS__DIMENSION": "8", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_an_interrupted_bulk_load_gets_its_index_back_from_the_next_run_even_an_interrupted_one(
    database: DatabaseSettings, db_url: str, options: BackfillOptions
) -> None:
    """Finding 4: a stopped bulk load left the vector index missing until some later run COMPLETED (the
    hourly job, itself a bulk load over the API, never did). The next run builds it before anything else,
    so even a run stopped in its turn leaves it valid."""
    source = MemorySource(corpus(20))
    with pytest.raises(BackfillInterrupted):  # into an empty table: a bulk load, stopped
        run_backfill(database, source, Interrupting(at_call=3), options)
    assert _index_oid(db_url) is None
    status = _cli(db_url, "db", "status")
    assert status.returncode == 1
    assert "the vector index is missing" in status.stdout
    assert "citebot backfill --build-index" in status.stdout
    with pytest.raises(BackfillInterrupted) as info:  # the next run, stopped too
        run_backfill(database, source, Interrupting(at_call=2), options)
    assert info.value.summary.index_build_s > 0
    assert _index_oid(db_url) is not None
    assert _cli(db_url, "db", "status").returncode == 0
    rest = run_backfill(database, source, FakeEmbedder(model=TEST_MODEL), options)
    assert (rest.status, rest.index_build_s) == ("done", 0)
    assert sorted(indexed(db_url)) == list(range(1, 21))


def test_build_index_builds_a_missing_index_and_is_refused_during_a_bulk_load(
    database: DatabaseSettings, db_url: str, embedder: FakeEmbedder, options: BackfillOptions
) -> None:
    run_backfill(database, MemorySource(corpus(6)), embedder, options)
    with psycopg.connect(db_url) as conn:
        conn.execute("DROP INDEX post_index_embedding_hnsw")
    with BackfillLock(db_url, "file:/x", exclusive=True):  # a bulk load holds it dropped
        busy = _cli(db_url, "backfill", "--build-index")
    assert busy.returncode == 1
    assert "bulk" in busy.stderr
    assert _index_oid(db_url) is None
    built = _cli(db_url, "backfill", "--build-index")
    assert built.returncode == 0, built.stderr
    assert "vector index built" in built.stdout
    assert _index_oid(db_url) is not None
    assert "nothing to do" in _cli(db_url, "backfill", "--build-index").stdout
