"""``calibration_read``: what ``citebot calibrate`` has read of the forum, saved after each batch.

Reading the forum is a run's long part through the API (every post walked within the site-wide API
budget: hours on a large forum). After each batch the source yields, the posts the questions are built
from (``worker.calibration.questions.solved_questions``: each topic's opening post and its accepted
answers, nothing else) and the source's cursor are committed together (migration 0017), so a run
stopped while reading is continued by the same command from the batch after the last one saved, and
ends with the same posts as an uninterrupted read. A read that reached the source's end is kept too
(``done``): a run stopped while the questions are asked does not read the forum again.

The saved read belongs to the source (its key: ``db``, ``api``, ``file:<path>``), not to a model set:
the read does not depend on the models. It is reused only:

- for the same source key (another source's saved read is never used);
- while it is younger than ``READ_MAX_AGE`` (counted from when the read began): an older read may
  miss topics solved since, so it is deleted and the forum read again.

A run that ends deletes it, and ``--restart`` discards it. Two runs of one source at once (the nightly
job and an admin's) never mix their reads: a run saves only into the row it began or continued
(``started_at``), and reads on unsaved once another run has taken it over or deleted it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from worker.calibration.questions import SolvedPost

log = logging.getLogger(__name__)

READ_MAX_AGE = timedelta(hours=48)  # a saved read begun longer ago is read again


@dataclass(frozen=True, slots=True)
class KeptPost:
    """What the questions need of a post (``SolvedPost``): an opening post with its HTML, or an
    accepted answer (no HTML)."""

    post_id: int
    topic_id: int
    post_number: int
    cooked: str = ""
    accepted_answer: bool = False


def kept(post: SolvedPost) -> KeptPost | None:
    """``post`` as the read keeps it, or None when no question is built from it."""
    if post.post_number == 1:
        return KeptPost(post.post_id, post.topic_id, 1, post.cooked, post.accepted_answer)
    if post.accepted_answer:
        return KeptPost(post.post_id, post.topic_id, post.post_number, accepted_answer=True)
    return None


@dataclass(frozen=True, slots=True)
class ReadState:
    """Where a saved read stands: resume ``read(cursor)``; nothing left to read when ``done``."""

    cursor: int | None
    done: bool
    posts_read: int
    requests: int | None


class SavedRead:
    """The saved read of one source (module docstring), over an autocommit connection."""

    def __init__(self, conn: psycopg.Connection, source: str, *, max_age: timedelta = READ_MAX_AGE) -> None:
        self._conn = conn
        self.source = source
        self.max_age = max_age
        # The saved read this run continues (its row's started_at), and whether another run took the
        # row over or deleted it (then this run reads on without saving: the row is not its own).
        self._began: Any = None
        self.detached = False

    def prepare(self) -> ReadState | None:
        """Delete the saved reads begun more than ``max_age`` ago (any source); this source's state,
        or None when there is nothing to continue."""
        gone = self._conn.execute(
            "DELETE FROM calibration_read WHERE started_at < now() - %s RETURNING source", (self.max_age,)
        ).fetchall()
        for (source,) in gone:
            log.info("calibrate: the saved read of %s is older than %s: deleted", source, self.max_age)
        row = self._conn.execute(
            "SELECT cursor, done, posts_read, requests, started_at FROM calibration_read WHERE source = %s",
            (self.source,),
        ).fetchone()
        self._began, self.detached = (row[4] if row else None), False
        if row is None:
            return None
        return ReadState(
            None if row[0] is None else int(row[0]),
            bool(row[1]),
            int(row[2]),
            None if row[3] is None else int(row[3]),
        )

    def load(self) -> list[KeptPost]:
        """The posts kept so far, in post id order."""
        return [
            KeptPost(int(pid), int(tid), int(num), cooked or "", accepted_answer=int(num) != 1)
            for pid, tid, num, cooked in self._conn.execute(
                "SELECT post_id, topic_id, post_number, cooked FROM calibration_read_post"
                " WHERE source = %s ORDER BY post_id",
                (self.source,),
            )
        ]

    def save(
        self,
        posts: Iterable[KeptPost],
        *,
        cursor: int | None,
        read: int,
        requests: int | None = None,
        done: bool = False,
    ) -> None:
        """One batch's kept ``posts`` and the cursor past it, committed together; ``read`` and
        ``requests`` are the read's totals so far."""
        if self.detached:
            return
        with self._conn.transaction():
            if self._began is None:  # the read begins: its row, unless another run's began meanwhile
                row = self._conn.execute(
                    "INSERT INTO calibration_read (source, cursor, done, posts_read, requests)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (source) DO NOTHING RETURNING started_at",
                    (self.source, cursor, done, read, requests),
                ).fetchone()
            else:
                row = self._conn.execute(
                    "UPDATE calibration_read SET cursor = %s, done = %s, posts_read = %s, requests = %s,"
                    " saved_at = now() WHERE source = %s AND started_at = %s RETURNING started_at",
                    (cursor, done, read, requests, self.source, self._began),
                ).fetchone()
            if row is None:
                self.detached = True
                log.warning(
                    "calibrate: another run of %s took over or ended its saved read: this read goes on "
                    "without being saved",
                    self.source,
                )
                return
            self._began = row[0]
            rows = [(self.source, p.post_id, p.topic_id, p.post_number, p.cooked or None) for p in posts]
            if rows:
                with self._conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO calibration_read_post (source, post_id, topic_id, post_number, cooked)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (source, post_id) DO UPDATE"
                        " SET topic_id = EXCLUDED.topic_id, post_number = EXCLUDED.post_number,"
                        " cooked = EXCLUDED.cooked",
                        rows,
                    )

    def clear(self) -> None:
        """Delete this source's saved read (the run ended, or ``--restart``)."""
        self._conn.execute("DELETE FROM calibration_read WHERE source = %s", (self.source,))
        self._began, self.detached = None, False
