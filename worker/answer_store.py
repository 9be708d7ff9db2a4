"""The answers store as a protocol: ``AnswerStore``, with ``PostgresAnswerStore`` over the ``answers``
table (``worker.answers``' functions, one borrowed connection per call) and ``FakeAnswerStore`` in
memory (``worker.testing.answers``).

The pipeline and the poller call ``worker.answers`` on a connection they hold, because they need the
row and the post's advisory lock in one transaction; code that needs only the row (the actors' tests,
an answerer double, the CLI listings) can depend on this protocol instead, and the contract suite
(``tests/contracts/test_answer_store.py``) holds both implementations to the same behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg

from worker import answers
from worker.answers import Answer, AnswerState
from worker.domain import Delivery

ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]


class AnswerStore(Protocol):
    """One row per question post and its state machine (``worker.answers`` documents each method)."""

    def claim(
        self,
        post_id: int,
        topic_id: int,
        post_number: int | None,
        version: int | None,
        user_id: int | None,
        username: str | None,
        enqueued_by: str,
    ) -> bool: ...

    def claim_delivery(self, delivery: Delivery) -> bool: ...

    def get(self, post_id: int) -> Answer | None: ...

    def existing(self, post_ids: Collection[int]) -> set[int]: ...

    def states_of(self, post_ids: Collection[int]) -> dict[int, AnswerState]: ...

    def claim_stale(
        self, older_than_s: float, newer_than_s: float, limit: int = 100
    ) -> list[tuple[int, int, int]]: ...

    def record_author(self, post_id: int, user_id: int, username: str, post_number: int) -> None: ...

    def record_error(self, post_id: int, error: str) -> None: ...

    def transition(
        self, post_id: int, from_states: Collection[AnswerState], to_state: AnswerState, **fields: object
    ) -> bool: ...

    def is_bot_reply(self, topic_id: int, post_number: int) -> bool: ...

    def recent(
        self,
        state: AnswerState | None = None,
        limit: int = 20,
        *,
        reason: str | None = None,
        unanswered: bool = False,
    ) -> list[Answer]: ...

    def count_by_state(self) -> dict[str, int]: ...

    def count_unanswered(self) -> dict[tuple[str, str], int]: ...


class PostgresAnswerStore:
    """``AnswerStore`` over the ``answers`` table; each call borrows a connection and commits on return."""

    def __init__(self, connections: ConnectionSource) -> None:
        self._connections = connections

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
        with self._connections() as conn:
            return answers.claim(
                conn, post_id, topic_id, post_number, version, user_id, username, enqueued_by
            )

    def claim_delivery(self, delivery: Delivery) -> bool:
        with self._connections() as conn:
            return answers.claim_delivery(conn, delivery)

    def get(self, post_id: int) -> Answer | None:
        with self._connections() as conn:
            return answers.get(conn, post_id)

    def existing(self, post_ids: Collection[int]) -> set[int]:
        with self._connections() as conn:
            return answers.existing(conn, post_ids)

    def states_of(self, post_ids: Collection[int]) -> dict[int, AnswerState]:
        with self._connections() as conn:
            return answers.states_of(conn, post_ids)

    def claim_stale(
        self, older_than_s: float, newer_than_s: float, limit: int = 100
    ) -> list[tuple[int, int, int]]:
        with self._connections() as conn:
            return answers.claim_stale(conn, older_than_s, newer_than_s, limit)

    def record_author(self, post_id: int, user_id: int, username: str, post_number: int) -> None:
        with self._connections() as conn:
            answers.record_author(conn, post_id, user_id, username, post_number)

    def record_error(self, post_id: int, error: str) -> None:
        with self._connections() as conn:
            answers.record_error(conn, post_id, error)

    def transition(
        self, post_id: int, from_states: Collection[AnswerState], to_state: AnswerState, **fields: object
    ) -> bool:
        with self._connections() as conn:
            return answers.transition(conn, post_id, from_states, to_state, **fields)

    def is_bot_reply(self, topic_id: int, post_number: int) -> bool:
        with self._connections() as conn:
            return answers.is_bot_reply(conn, topic_id, post_number)

    def recent(
        self,
        state: AnswerState | None = None,
        limit: int = 20,
        *,
        reason: str | None = None,
        unanswered: bool = False,
    ) -> list[Answer]:
        with self._connections() as conn:
            return answers.recent(conn, state, limit, reason=reason, unanswered=unanswered)

    def count_by_state(self) -> dict[str, int]:
        with self._connections() as conn:
            return answers.count_by_state(conn)

    def count_unanswered(self) -> dict[tuple[str, str], int]:
        with self._connections() as conn:
            return answers.count_unanswered(conn)
