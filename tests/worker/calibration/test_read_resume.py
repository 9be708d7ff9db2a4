"""``citebot calibrate`` stopped while reading the forum and continued: the read saved after each batch
(``calibration_read``), continued from the saved cursor by the same command, never reused when it is
stale or another source's; through the API the continued read makes fewer requests than a new one."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import make_settings
from tests.worker.calibration.conftest import SAMPLE, calibrate_args
from worker.calibration.questions import CalibrationQuestion, solved_questions
from worker.calibration.read import READ_MAX_AGE, KeptPost, SavedRead, kept
from worker.testing.models import FakeEmbedder

BATCH = 100  # the sample's 705 posts: 8 batches


class Batches:
    """Counts the batches a source's ``read`` yields and, once ``stop_after`` were yielded, raises
    ``KeyboardInterrupt`` when the next is asked for (as Ctrl-C or SIGTERM would, mid-read)."""

    def __init__(self, real: Callable[..., Iterator[Any]]) -> None:
        self.real = real
        self.yielded = 0
        self.cursors: list[int | None] = []  # where each read began
        self.stop_after: int | None = None

    def read(self, source: Any, cursor: int | None, *, batch_size: int) -> Iterator[Any]:
        self.cursors.append(cursor)
        for batch in self.real(source, cursor, batch_size=batch_size):
            if self.stop_after is not None and self.yielded >= self.stop_after:
                raise KeyboardInterrupt
            self.yielded += 1
            yield batch


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def spy(cls: type, monkeypatch: pytest.MonkeyPatch) -> Batches:
    batches = Batches(cls.read)  # type: ignore[attr-defined]

    def read(self: Any, cursor: int | None, *, batch_size: int) -> Iterator[Any]:
        return batches.read(self, cursor, batch_size=batch_size)

    monkeypatch.setattr(cls, "read", read)
    return batches


def built_questions(monkeypatch: pytest.MonkeyPatch) -> list[list[CalibrationQuestion]]:
    """Every list of questions ``backfill.calibrate.run`` builds from what it read."""
    import backfill.calibrate

    out: list[list[CalibrationQuestion]] = []

    def keep(*args: Any, **kwargs: Any) -> list[CalibrationQuestion]:
        qs = solved_questions(*args, **kwargs)
        out.append(qs)
        return qs

    monkeypatch.setattr(backfill.calibrate, "solved_questions", keep)
    return out


def saved_read(url: str) -> tuple[Any, ...] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT r.source, r.cursor, r.done, r.posts_read, (SELECT count(*) FROM calibration_read_post p"
            " WHERE p.source = r.source) FROM calibration_read r"
        ).fetchone()
        total = conn.execute("SELECT count(*) FROM calibration_read_post").fetchone()
    assert total is not None
    if row is None:
        assert total[0] == 0  # no post outlives its read
    return None if row is None else tuple(row)


@pytest.mark.integration
@pytest.mark.slow
def test_a_run_stopped_while_reading_continues_the_read_and_builds_the_same_questions(
    indexed_sample: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from backfill.calibrate import run
    from backfill.sources.file import FileSource

    url = indexed_sample
    settings = make_settings(url, "redis://127.0.0.1:1/0")
    ids = [p.post_id for b in FileSource(SAMPLE).read(None, batch_size=BATCH) for p in b.posts]
    batches = spy(FileSource, monkeypatch)
    built = built_questions(monkeypatch)

    def calibrate(out: Path) -> int:
        args = calibrate_args(out, progress_every=0.0)
        return run(settings, args, embedder=FakeEmbedder(model="test-model"), read_batch=BATCH)

    assert calibrate(tmp_path / "whole") == 0  # uninterrupted, for comparison
    whole = json.loads((tmp_path / "whole" / "out.json").read_text("utf-8"))
    all_batches = batches.yielded
    assert all_batches == 8
    assert saved_read(url) is None  # a run that ends deletes its saved read
    (uninterrupted,) = built

    # Stopped after 3 batches, as Ctrl-C would: what those batches kept is saved with their cursor.
    batches.yielded, batches.stop_after, batches.cursors = 0, 3, []
    capsys.readouterr()
    assert calibrate(tmp_path / "stopped") == 130
    err = capsys.readouterr().err
    assert "interrupted while reading the forum; what was read is saved" in err
    assert "KeyboardInterrupt" not in err  # said in one line, not as a traceback
    row = saved_read(url)
    assert row is not None
    source, cursor, done, posts_read, kept_posts = row
    assert source == f"file:{SAMPLE}"
    assert (cursor, done, posts_read) == (ids[3 * BATCH - 1], False, 3 * BATCH)
    assert 0 < kept_posts < 3 * BATCH  # the opening posts and accepted answers only
    assert not (tmp_path / "stopped" / "out.json").exists()

    # The same command continues from the saved cursor: only the 5 remaining batches are read.
    batches.yielded, batches.stop_after, batches.cursors = 0, None, []
    records = Records()
    backfill_log = logging.getLogger("backfill")  # whatever another test left on the root logger
    level = backfill_log.level
    backfill_log.addHandler(records)
    backfill_log.setLevel(logging.INFO)
    try:
        assert calibrate(tmp_path / "stopped") == 0
    finally:
        backfill_log.removeHandler(records)
        backfill_log.setLevel(level)
    assert batches.cursors == [cursor]
    assert batches.yielded == all_batches - 3
    resumed = built[-1]
    assert resumed == uninterrupted  # the same questions, in the same order
    out = json.loads((tmp_path / "stopped" / "out.json").read_text("utf-8"))
    assert out["model"] == whole["model"]
    assert out["questions"]["solved_topics"] == whole["questions"]["solved_topics"]
    assert saved_read(url) is None
    # progress counts from where the read continued: the posts left, not the whole forum
    caplog_lines = [r.getMessage() for r in records.records]
    reading = [line for line in caplog_lines if line.startswith(f"calibrate: reading file:{SAMPLE} ")]
    assert any(f"continuing after post {cursor} ({3 * BATCH} posts read before)" in x for x in caplog_lines)
    assert reading, "no progress line for the read"
    assert f"/{len(ids) - 3 * BATCH} posts (" in reading[-1]


def test_kept_is_what_the_questions_are_built_from() -> None:
    opening = KeptPost(10, 1, 1, "<p>How do I set up shadows on my terrain?</p>")
    answer = KeptPost(12, 1, 3, "<p>Raise the depth bias</p>", accepted_answer=True)
    other = KeptPost(11, 1, 2, "<p>No idea</p>")
    assert kept(opening) == opening
    assert kept(answer) == KeptPost(12, 1, 3, "", accepted_answer=True)  # its HTML is not needed
    assert kept(other) is None
    assert solved_questions([kept(opening), kept(answer)]) == solved_questions(  # type: ignore[list-item]
        [opening, other, answer]
    )


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


POSTS = [KeptPost(10, 1, 1, "<p>How do I set up shadows?</p>"), KeptPost(12, 1, 3, accepted_answer=True)]


@pytest.mark.integration
def test_a_saved_read_is_only_the_same_sources_and_not_older_than_the_bound(
    conn: psycopg.Connection,
) -> None:
    read = SavedRead(conn, "file:/exports/a")
    assert read.prepare() is None
    read.save(POSTS, cursor=12, read=40)
    state = read.prepare()
    assert state is not None
    assert (state.cursor, state.done, state.posts_read, state.requests) == (12, False, 40, None)
    assert read.load() == POSTS
    assert SavedRead(conn, "file:/exports/b").prepare() is None  # another source's read is not used
    assert SavedRead(conn, "api").load() == []
    # another run of the same source that ends deletes the read: this one reads on, saving nothing
    SavedRead(conn, "file:/exports/a").clear()
    read.save([KeptPost(20, 2, 1, "<p>Why is my build slow?</p>")], cursor=20, read=60)
    assert read.detached
    assert SavedRead(conn, "file:/exports/a").prepare() is None
    assert read.prepare() is None  # the next run begins a new read, saved again
    assert not read.detached
    read.save(POSTS, cursor=12, read=40)
    assert read.prepare() is not None
    # a read begun longer ago than the bound is deleted, not continued
    conn.execute("UPDATE calibration_read SET started_at = now() - %s - interval '1 minute'", (READ_MAX_AGE,))
    assert read.prepare() is None
    assert read.load() == []
    row = conn.execute("SELECT count(*) FROM calibration_read_post").fetchone()
    assert row is not None
    assert row[0] == 0


@pytest.mark.integration
def test_restart_discards_the_saved_read_and_a_finished_read_is_not_read_again(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backfill.calibrate import _read
    from backfill.sources.file import FileSource

    batches = spy(FileSource, monkeypatch)
    source = FileSource(SAMPLE, assume_public=True)
    read = SavedRead(conn, source.key)
    args = argparse.Namespace(restart=False, progress="log", progress_every=30.0)
    posts, requests = _read(source, read, args, 300)
    assert (batches.yielded, requests) == (3, None)
    state = read.prepare()
    assert state is not None
    assert state.done
    # a run stopped after the read (while the questions are asked) does not read the forum again
    assert _read(source, read, args, 300) == (posts, None)
    assert batches.yielded == 3
    # --restart reads it all again
    batches.stop_after = 4
    with pytest.raises(KeyboardInterrupt):
        _read(source, read, argparse.Namespace(**{**vars(args), "restart": True}), 300)
    assert batches.cursors[-1] is None
    state = read.prepare()
    assert state is not None
    assert (state.done, state.posts_read) == (False, 300)


@pytest.mark.integration
def test_a_read_through_the_api_stopped_and_continued_makes_fewer_requests_than_a_new_one(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from backfill.calibrate import read_kept
    from backfill.sources.api import ApiSource
    from tests.backfill.test_api_source import make_source, serve

    with serve(db_url, tmp_path) as double, psycopg.connect(db_url, autocommit=True) as conn:
        batches = spy(ApiSource, monkeypatch)
        sleeps: list[float] = []
        fresh = make_source(double, sleeps)
        whole, whole_requests = read_kept(fresh, SavedRead(conn, "fresh"), None)
        assert whole_requests == fresh.requests > 0
        all_batches = batches.yielded

        read = SavedRead(conn, "api")
        batches.yielded, batches.stop_after = 0, 1
        stopped = make_source(double, sleeps)
        with pytest.raises(KeyboardInterrupt):
            read_kept(stopped, read, None)
        state = read.prepare()
        assert state is not None
        # the requests up to the saved batch (those for the batch it was reading when stopped are lost)
        assert state.requests is not None
        assert 0 < state.requests <= stopped.requests
        batches.yielded, batches.stop_after = 0, None
        resumed = make_source(double, sleeps)
        posts, requests = read_kept(resumed, read, state)
        assert batches.yielded == all_batches - 1
        assert 0 < resumed.requests < fresh.requests  # the walk is not paid again
        assert requests == state.requests + resumed.requests  # the read's requests, both runs'
    assert solved_questions(posts) == solved_questions(whole)
    assert {q.topic_id for q in solved_questions(posts)} == {1, 2, 3}
