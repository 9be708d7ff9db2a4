"""Generation: the prompt (persona, refusal clause, fenced evidence per zone), its versioned templates,
the offline extractive generator and the fake chat model. The HTTP client is ``worker.clients.llm``.
"""

from worker.generation.offline import OFFLINE_FOOTER, OFFLINE_NOTE, OfflineGenerator
from worker.generation.prompt import Prompt, build_prompt
from worker.generation.prompt_templates import PromptTemplates, load_templates

__all__ = [
    "OFFLINE_FOOTER",
    "OFFLINE_NOTE",
    "OfflineGenerator",
    "Prompt",
    "PromptTemplates",
    "build_prompt",
    "load_templates",
]
