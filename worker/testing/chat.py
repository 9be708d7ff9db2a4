"""``FakeChatModel``: a real ``ChatModel`` for tests, with canned replies and a recorded history."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from worker.domain import Completion, Usage

Reply = str | Completion | BaseException


class FakeChatModel:
    """Answers each ``complete`` call with the next queued reply, or raises it if it is an exception.

    ``history`` holds a copy of the messages of every call, in order, including calls that raised.
    With ``default`` set, an empty queue answers ``default``; without, it fails the test loudly.
    """

    def __init__(
        self, replies: Iterable[Reply] = (), *, name: str = "fake-model", default: str | None = None
    ) -> None:
        self._replies: deque[Reply] = deque(replies)
        self._name = name
        self._default = default
        self.history: list[list[dict[str, str]]] = []

    @property
    def name(self) -> str:
        return self._name

    def queue(self, *replies: Reply) -> None:
        """Add replies to the end of the queue."""
        self._replies.extend(replies)

    @property
    def calls(self) -> int:
        return len(self.history)

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        self.history.append([dict(m) for m in messages])
        if not self._replies:
            if self._default is None:
                raise AssertionError(f"FakeChatModel: call {len(self.history)} has no reply queued")
            return self._completion(self._default, messages)
        reply = self._replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        return self._completion(reply, messages)

    def _completion(self, text: str, messages: Sequence[dict[str, str]]) -> Completion:
        prompt_chars = sum(len(m.get("content", "")) for m in messages)
        return Completion(text=text, model=self._name, usage=Usage(prompt_chars // 4, max(1, len(text) // 4)))
