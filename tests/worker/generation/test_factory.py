"""chat_model_from: the LLM client when a base URL is set, the offline generator otherwise."""

from __future__ import annotations

import httpx

from worker.clients.llm import OpenAIChatClient
from worker.generation.factory import chat_model_from
from worker.generation.offline import OfflineGenerator
from worker.settings import LlmSettings


def test_offline_without_a_base_url() -> None:
    with httpx.Client() as http:
        model = chat_model_from(LlmSettings.model_validate({}), http)
    assert isinstance(model, OfflineGenerator)
    assert model.complete([{"role": "user", "content": "hi"}]).offline is True


def test_client_with_a_base_url() -> None:
    with httpx.Client() as http:
        model = chat_model_from(
            LlmSettings.model_validate({"base_url": "http://127.0.0.1:11434", "model": "m"}), http
        )
    assert isinstance(model, OpenAIChatClient)
    assert model.name == "m"
