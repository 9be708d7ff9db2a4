"""FakeChatModel: canned replies, raised errors, recorded history."""

from __future__ import annotations

import pytest

from worker.domain import Completion, Usage
from worker.errors import ServiceUnavailableError
from worker.protocols import ChatModel
from worker.testing.chat import FakeChatModel

MESSAGES = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "hello there"}]


def test_replies_in_order_and_records_history() -> None:
    model = FakeChatModel(["first [[1]]", Completion("second", "other", Usage(5, 1))], name="m")
    assert isinstance(model, ChatModel)
    one = model.complete(MESSAGES)
    two = model.complete([{"role": "user", "content": "again"}])
    assert one.text == "first [[1]]"
    assert one.model == "m"
    assert one.usage == Usage(prompt_tokens=4, completion_tokens=2)  # 18 chars / 4, 11 chars / 4
    assert two == Completion("second", "other", Usage(5, 1))
    assert model.history == [MESSAGES, [{"role": "user", "content": "again"}]]
    assert model.calls == 2


def test_queued_exceptions_are_raised_and_still_recorded() -> None:
    model = FakeChatModel([ServiceUnavailableError("down", service="llm", status=500)])
    model.queue("after")
    with pytest.raises(ServiceUnavailableError, match="down"):
        model.complete(MESSAGES)
    assert model.complete(MESSAGES).text == "after"
    assert model.calls == 2


def test_history_is_a_copy() -> None:
    model = FakeChatModel(["ok"])
    messages = [{"role": "user", "content": "q"}]
    model.complete(messages)
    messages[0]["content"] = "changed"
    assert model.history[0][0]["content"] == "q"


def test_empty_queue_fails_loudly_or_uses_the_default() -> None:
    with pytest.raises(AssertionError, match="call 1 has no reply queued"):
        FakeChatModel().complete(MESSAGES)
    model = FakeChatModel(default="same")
    assert [model.complete(MESSAGES).text for _ in range(3)] == ["same", "same", "same"]
