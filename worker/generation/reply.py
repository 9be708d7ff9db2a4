"""Stages 4 and 5 of one answer: the prompt, the model, the sanitizer, and the words the bot adds itself.

:func:`write_reply` is the one place these run: the worker's pipeline (``worker.pipeline``) calls it for
every answer (and again when the last check drops a source), ``citebot ask`` calls it to show the reply
the worker would post. In order:

1. the prompt (``build_prompt``): the evidence of the zone, the place the member asked in and the
   question's language;
2. the chat model (the LLM, or the offline generator);
3. the sanitizer: ``[[n]]`` markers become links, every link the model wrote is stripped;
4. a weak-zone reply that cites nothing gets the closest topics, cited (``closest_topics``), rather than
   a bare "I found nothing";
5. a reply written without a language model gets its label, in the question's language
   (:attr:`Written.reply`).

Raising on a reply the sanitizer could not make safe is the caller's choice (the worker posts nothing;
``citebot ask`` says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from sanitizer import LinkGrain, SanitizeResult, sanitize
from worker.domain import Completion, Source, Zone
from worker.generation.offline import closest_topics, offline_label
from worker.generation.prompt import Prompt, build_prompt
from worker.generation.wording import LANGUAGE_NAMES, Place
from worker.protocols import ChatModel

# A stage of the answer's trace: ``stage(name)`` is a context manager whose value has ``info`` and
# ``counts`` dicts (``worker.trace.Trace.stage``).
StageOpener = Callable[[str], AbstractContextManager[Any]]


@dataclass(slots=True)
class _Untraced:
    info: dict[str, object] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


@contextmanager
def untraced(_name: str) -> Iterator[_Untraced]:
    """A stage that records nothing (``citebot ask`` prints its own summary)."""
    yield _Untraced()


@dataclass(frozen=True, slots=True)
class Written:
    """What stages 4 and 5 produced: the prompt sent, the model's completion, the sanitized reply."""

    prompt: Prompt
    completion: Completion
    clean: SanitizeResult
    language: str

    @property
    def ok(self) -> bool:
        """The sanitizer made the reply safe and something is left to post."""
        return self.clean.ok and bool(self.clean.text.strip())

    @property
    def reply(self) -> str:
        """The text to post: the sanitized reply, and the offline label when no language model wrote it."""
        if not self.completion.offline:
            return self.clean.text
        return f"{self.clean.text}\n\n{offline_label(self.language, bool(self.clean.cited))}"


def write_reply(
    question: str,
    sources: Sequence[Source],
    zone: Zone,
    *,
    chat: ChatModel,
    bot_name: str,
    base_url: str,
    grain: LinkGrain,
    token_budget: int,
    floor: float | None = None,
    place: Place = "new_topic",
    language: str = "en",
    stage: StageOpener = untraced,
) -> Written:
    """Prompt, generate and sanitize one reply to ``question`` over ``sources`` (see the module
    docstring); each step is timed as a stage of ``stage`` (``prompt``, ``generate``, ``sanitize``)."""
    with stage("prompt") as st:
        prompt = build_prompt(
            question,
            sources,
            zone,
            bot_name=bot_name,
            token_budget=token_budget,
            floor=floor,
            place=place,
            language=LANGUAGE_NAMES[language] if language != "en" else None,
        )
        st.info.update(prompt.trace())
    with stage("generate") as st:
        completion = chat.complete(prompt.messages)
        st.info["model"] = completion.model
        st.info["offline"] = completion.offline
        st.counts["prompt_tokens"] = completion.usage.prompt_tokens
        st.counts["completion_tokens"] = completion.usage.completion_tokens
    with stage("sanitize") as st:
        evidence = [s.as_evidence() for s in prompt.sources_used]
        clean = sanitize(completion.text, evidence, links=grain, base_url=base_url, allow_canned=False)
        if clean.ok and not clean.cited and prompt.zone == "weak" and prompt.sources_used:
            text = f"{completion.text}\n\n{closest_topics(prompt.sources_used, language, place)}"
            clean = sanitize(text, evidence, links=grain, base_url=base_url, allow_canned=False)
            st.info["closest_topics"] = True
        st.info["reasons"] = list(clean.reasons)
        st.info["cited"] = list(clean.cited)
        st.info["dropped"] = list(clean.dropped)
    return Written(prompt, completion, clean, language)


__all__ = ["StageOpener", "Written", "untraced", "write_reply"]
