"""``ClaimingAnswerer``: the ``Answerer`` contract without the answer, for tests of the intake path.

It claims each delivery's ``answers`` row exactly as the pipeline does (``answers.claim_delivery``) and
records what it was handed; the row stays ``queued``. Tests of the queue (retries, last attempts, one
row for many deliveries) script what happens after the claim on top of it.
"""

from __future__ import annotations

from worker import answers
from worker.domain import Delivery
from worker.runtime import Runtime


class ClaimingAnswerer:
    """Claims the row of each delivery; ``open_calls`` counts the deliveries that found it open."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.deliveries: list[Delivery] = []
        self.open_calls: list[int] = []

    def claim(self, delivery: Delivery) -> answers.Answer | None:
        """Claim as the pipeline does; the row, or None when it is already final (nothing to do)."""
        with self.runtime.pool.connection() as conn:
            answers.claim_delivery(conn, delivery)
            row = answers.get(conn, delivery.post_id)
        if row is None or row.state in answers.FINAL_STATES:
            return None
        self.open_calls.append(delivery.post_id)
        return row

    def answer(self, delivery: Delivery, *, last_attempt: bool = False) -> None:
        self.deliveries.append(delivery)
        self.claim(delivery)
