"""``chat_model_from``: the chat model the settings ask for (the offline generator when no LLM is set)."""

from __future__ import annotations

import httpx

from worker.clients.llm import OpenAIChatClient
from worker.generation.offline import OfflineGenerator
from worker.protocols import ChatModel
from worker.settings import LlmSettings


def chat_model_from(settings: LlmSettings, http: httpx.Client) -> ChatModel:
    """``OpenAIChatClient`` over ``http`` when ``CITEBOT_LLM__BASE_URL`` is set, else ``OfflineGenerator``."""
    if settings.base_url:
        return OpenAIChatClient(http, settings)
    return OfflineGenerator()
