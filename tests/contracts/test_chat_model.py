"""The ``ChatModel`` contract: a completion with text, the model's name and token counts."""

from __future__ import annotations

from worker.protocols import ChatModel

MESSAGES = [
    {"role": "system", "content": "You answer from the sources."},
    {"role": "user", "content": "How do I stop shadow flicker? Sources: [[1]] ..."},
]


def test_a_completion_has_text_a_model_and_usage(chat: ChatModel) -> None:
    completion = chat.complete(MESSAGES)
    assert completion.text.strip()
    assert "[[1]]" in completion.text
    assert completion.model
    assert completion.usage.prompt_tokens >= 0
    assert completion.usage.completion_tokens > 0
    assert completion.offline is False
    assert chat.name
