"""``FakeAnswerStore``: the ``AnswerStore`` protocol (``worker.answer_store``) in memory.

It follows the SQL of ``worker/answers.py`` statement by statement, so the contract suite
(``tests/contracts/test_answer_store.py``) runs the same assertions on it and on the ``answers`` table:
``claim`` inserts once per post (``ON CONFLICT DO NOTHING``), ``transition`` moves a row only from one of
``from_states`` (the conditional UPDATE) and counts a move into an unanswered state in
``citebot_unanswered_total``, jsonb columns come back as JSON would give them (tuples as lists),
``recent`` orders by ``updated_at`` then id, newest first, and ``claim_stale`` picks the rows the poller
would re-send. Each write takes a fresh timestamp, strictly later than the last (PostgreSQL's ``now()``
is the statement's transaction start; in autocommit every call is its own transaction).

``now`` can be replaced (a callable returning an aware ``datetime``) to age rows without sleeping.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.answers import _FIELDS, _JSON_FIELDS, STATES, UNANSWERED_STATES, Answer, AnswerState
from worker.domain import Delivery
from worker.metrics import UNANSWERED

_OPEN = ("queued", "retrieved", "generated")


class FakeAnswerStore:
    """An in-memory ``answers`` table; ``rows`` maps post id to its ``Answer``."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self.rows: dict[int, Answer] = {}
        self._reply_numbers: dict[int, int | None] = {}  # reply_post_number, a column Answer lacks
        self._ids = itertools.count(1)
        self._now = now or (lambda: datetime.now(UTC))
        self._last = datetime.min.replace(tzinfo=UTC)
        self._lock = threading.Lock()

    def _tick(self) -> datetime:
        t = self._now()
        if t <= self._last:
            t = self._last + timedelta(microseconds=1)
        self._last = t
        return t

    def claim(
        self,
        post_id: int,
        topic_id: int,
        post_number: int | None,
        version: int | None,
        user_id: int | None,
        username: str | None,
        enqueued_by: str,
    ) -> bool:
        with self._lock:
            row_id = next(self._ids)  # a bigserial advances even when the insert conflicts
            if post_id in self.rows:
                return False
            t = self._tick()
            self.rows[post_id] = Answer(
                id=row_id,
                post_id=post_id,
                topic_id=topic_id,
                post_number=post_number,
                post_version=version,
                user_id=user_id,
                username=username,
                state="queued",
                zone=None,
                rule_id=None,
                sources=[],
                reply_raw=None,
                reply_post_id=None,
                trace={},
                attempts=0,
                error=None,
                enqueued_by=enqueued_by,
                created_at=t,
                updated_at=t,
                posted_at=None,
                reason=None,
            )
            self._reply_numbers[post_id] = None
            return True

    def claim_delivery(self, delivery: Delivery) -> bool:
        d = delivery
        return self.claim(d.post_id, d.topic_id, None, d.version, None, None, d.source)

    def get(self, post_id: int) -> Answer | None:
        with self._lock:
            return self.rows.get(post_id)

    def existing(self, post_ids: Collection[int]) -> set[int]:
        with self._lock:
            return {p for p in post_ids if p in self.rows}

    def states_of(self, post_ids: Collection[int]) -> dict[int, AnswerState]:
        with self._lock:
            return {p: self.rows[p].state for p in post_ids if p in self.rows}

    def claim_stale(
        self, older_than_s: float, newer_than_s: float, limit: int = 100
    ) -> list[tuple[int, int, int]]:
        with self._lock:
            t = self._tick()
            stale = [
                r
                for r in self.rows.values()
                if r.updated_at < t - timedelta(seconds=older_than_s)
                and (
                    r.state == "held"
                    or (r.state in _OPEN and r.created_at > t - timedelta(seconds=newer_than_s))
                )
            ]
            stale.sort(key=lambda r: r.updated_at)
            picked = stale[: int(limit)]
            for r in picked:
                self.rows[r.post_id] = replace(r, updated_at=t)
            return sorted((r.post_id, r.topic_id, r.post_version or 1) for r in picked)

    def record_author(self, post_id: int, user_id: int, username: str, post_number: int) -> None:
        with self._lock:
            row = self.rows.get(post_id)
            if row is not None:
                self.rows[post_id] = replace(row, user_id=user_id, username=username, post_number=post_number)

    def record_error(self, post_id: int, error: str) -> None:
        with self._lock:
            row = self.rows.get(post_id)
            if row is not None:
                self.rows[post_id] = replace(row, error=error, updated_at=self._tick())

    def transition(
        self, post_id: int, from_states: Collection[AnswerState], to_state: AnswerState, **fields: object
    ) -> bool:
        if to_state not in STATES:
            raise ValueError(f"unknown state {to_state!r}")
        bad = set(from_states) - set(STATES)
        if bad or not from_states:
            raise ValueError(f"unknown or empty from_states {sorted(bad)!r}")
        unknown = set(fields) - _FIELDS
        if unknown:
            raise ValueError(f"cannot set {sorted(unknown)!r} on answers")
        with self._lock:
            row = self.rows.get(post_id)
            if row is None or row.state not in from_states:
                return False
            values: dict[str, Any] = {
                k: json.loads(json.dumps(v)) if k in _JSON_FIELDS else v for k, v in fields.items()
            }
            if "reply_post_number" in values:
                number = values.pop("reply_post_number")
                self._reply_numbers[post_id] = None if number is None else int(number)
            self.rows[post_id] = replace(row, state=to_state, updated_at=self._tick(), **values)
            reason = self.rows[post_id].reason
        if to_state in UNANSWERED_STATES and set(from_states) != {to_state}:
            UNANSWERED.labels(to_state, reason or "unknown").inc()
        return True

    def is_bot_reply(self, topic_id: int, post_number: int) -> bool:
        with self._lock:
            return any(
                self.rows[p].topic_id == topic_id and n == post_number for p, n in self._reply_numbers.items()
            )

    def recent(
        self,
        state: AnswerState | None = None,
        limit: int = 20,
        *,
        reason: str | None = None,
        unanswered: bool = False,
    ) -> list[Answer]:
        with self._lock:
            rows = list(self.rows.values())
        if state is not None:
            rows = [r for r in rows if r.state == state]
        if reason is not None:
            rows = [
                r
                for r in rows
                if r.reason is not None and (r.reason == reason or r.reason.startswith(reason + "."))
            ]
        if unanswered:
            rows = [r for r in rows if r.state in UNANSWERED_STATES]
        rows.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        return rows[: int(limit)]

    def count_by_state(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for r in self.rows.values():
                counts[r.state] = counts.get(r.state, 0) + 1
        return dict(sorted(counts.items()))

    def count_unanswered(self) -> dict[tuple[str, str], int]:
        with self._lock:
            counts: dict[tuple[str, str], int] = {}
            for r in self.rows.values():
                if r.state in UNANSWERED_STATES:
                    key = (r.state, r.reason or "unknown")
                    counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))
