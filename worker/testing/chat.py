"""``FakeChatModel``: a real ``ChatModel`` for tests, with canned replies and a recorded history; and
the bodies the local OpenAI-contract servers answer with (``chat_completion_body``,
``openai_unsupported_parameter``)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

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


def openai_unsupported_parameter(name: str, instead: str) -> dict[str, Any]:
    """OpenAI's 400 body for a parameter the model does not take."""
    return {
        "error": {
            "message": f"Unsupported parameter: '{name}' is not supported with this model. "
            f"Use '{instead}' instead.",
            "type": "invalid_request_error",
            "param": name,
            "code": "unsupported_parameter",
        }
    }


def chat_completion_body(model: str, content: str, *, completion_id: str = "chatcmpl-1") -> dict[str, Any]:
    """A ``chat.completion`` object with every field OpenAI's schema requires."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {"role": "assistant", "content": content, "refusal": None},
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }
