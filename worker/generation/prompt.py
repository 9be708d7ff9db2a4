"""``build_prompt``: persona and refusal clause (system), fenced evidence and question (user).

The system message is the trusted part and is never cut. The user message holds the evidence block of
the zone (``STABLE FORUM EVIDENCE`` with numbered ``[[n]]`` sources, the same marked weak, or an empty
block that asks the model to say it does not know) and then the member's question; every piece of
forum or member text in it is fenced and neutralised (:mod:`worker.generation.fence`).

Token budget: tokens are counted with ``count_tokens`` when given, else approximated as characters/4.
When the prompt is over budget, neighbour-post context goes first, then every excerpt is cut to the
same length (down to ``min_excerpt_chars``), then the lowest-ranked sources are dropped. If no source
fits, the prompt becomes an abstention. The question is capped at a quarter of the budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from worker.domain import Source, Zone
from worker.errors import ConfigError
from worker.generation import fence
from worker.generation.prompt_templates import PromptTemplates, load_templates
from worker.generation.wording import Place, ask_forum

log = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]
MESSAGE_OVERHEAD_TOKENS = 4  # role and separators the chat template adds around each message


def approx_tokens(text: str) -> int:
    """About one token per four characters: close for English, pessimistic enough for code."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class Prompt:
    """The messages for the chat model and what the trace needs to know about them."""

    messages: tuple[dict[str, str], ...]
    version: str
    zone: Zone
    sources_used: tuple[Source, ...]
    truncated: bool
    tokens: int
    fence: str

    def trace(self) -> dict[str, object]:
        """The prompt's entry in an answer's trace (no forum text)."""
        return {
            "prompt_version": self.version,
            "zone": self.zone,
            "sources": [s.n for s in self.sources_used],
            "truncated": self.truncated,
            "prompt_tokens": self.tokens,
        }


def _cut(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    head = text[:chars]
    space = head.rfind(" ")
    if space > chars * 0.7:
        head = head[:space]
    return head.rstrip() + " …"


def post_line(post_number: int) -> str:
    """Which post of its topic a source is: the question (#1) is context for its replies, not an answer."""
    role = "the topic's question" if post_number == 1 else "a reply"
    return f"Post: #{post_number}, {role}"


def _source_block(source: Source, token: str, cap: int | None, with_context: bool) -> str:
    excerpt = fence.neutralise(source.excerpt.strip())
    if cap is not None:
        excerpt = _cut(excerpt, cap)
    lines = [f"Title: {fence.one_line(source.title)}", post_line(source.post_number), "Excerpt:", excerpt]
    if with_context and source.context:
        lines.append("Nearby posts in the same topic:")
        lines.extend("- " + fence.one_line(c) for c in source.context)
    return fence.block("SOURCE", token, "\n".join(lines), label=f"[[{source.n}]]")


def _evidence(
    zone: Zone, place: Place, sources: Sequence[Source], token: str, cap: int | None, ctx: bool
) -> str:
    if zone == "abstain" or not sources:
        body = "(no sources)"
    else:
        body = "\n".join(_source_block(s, token, cap, ctx) for s in sources)
    return fence.block("EVIDENCE", token, body, label=f"zone={zone} place={place}")


class _Builder:
    def __init__(
        self,
        templates: PromptTemplates,
        system: str,
        question_block: str,
        token: str,
        count: TokenCounter,
        place: Place,
    ) -> None:
        self.templates = templates
        self.place = place
        self.question_block = question_block
        self.token = token
        self.count = count
        self.system = system
        self.fixed = count(system) + 2 * MESSAGE_OVERHEAD_TOKENS

    def user(self, zone: Zone, sources: Sequence[Source], cap: int | None, ctx: bool) -> str:
        evidence = _evidence(zone, self.place, sources, self.token, cap, ctx)
        return (
            self.templates.evidence(zone)
            .substitute(evidence=evidence, ask_forum=ask_forum(self.place))
            .rstrip()
            + "\n\n"
            + self.question_block
        )

    def cost(self, user: str) -> int:
        return self.fixed + self.count(user)


def _question_block(templates: PromptTemplates, question: str, token: str, language: str | None) -> str:
    rule = (
        f"Answer in {fence.one_line(language)[:40]}."
        if language
        else "Answer in the language the question is written in."
    )
    quoted = fence.block("QUESTION", token, question)
    return templates.question.substitute(question=quoted, language_rule=rule).rstrip() + "\n"


def build_prompt(
    question: str,
    sources: Sequence[Source],
    zone: Zone,
    *,
    bot_name: str = "citebot",
    forum_name: str = "community",
    language: str | None = None,
    token_budget: int = 6000,
    count_tokens: TokenCounter | None = None,
    templates: PromptTemplates | None = None,
    token: str | None = None,
    min_excerpt_chars: int = 160,
    floor: float | None = None,
    place: Place = "new_topic",
) -> Prompt:
    """Assemble the prompt of one answer; ``sources`` are best first and keep their own ``n``.

    ``place`` is where the member asked (``worker.generation.wording``): the weak and abstain blocks tell
    the model how to send the member to the forum from there, and the evidence line carries it for the
    offline generator. ``language`` (a language's name) makes the model answer in it.

    ``floor`` (the retrieval's ``RetrievalResult.floor``) leaves out every source scored below it: a
    source the calibration does not count as evidence of the zone is neither shown nor citable.

    Raises ConfigError when even the system part and an empty evidence block exceed ``token_budget``,
    ValueError when two sources share a number.
    """
    numbers = [s.n for s in sources]
    if len(set(numbers)) != len(numbers) or any(n < 1 for n in numbers):
        raise ValueError(f"source numbers must be unique and positive, got {numbers}")
    if floor is not None:
        sources = [s for s in sources if s.score is None or s.score >= floor]
    templates = templates or load_templates()
    count = count_tokens or approx_tokens
    token = token or fence.new_token()
    system = templates.system.substitute(
        bot_name=fence.one_line(bot_name), forum_name=fence.one_line(forum_name)
    ).strip()
    text = fence.neutralise(question.strip())
    truncated = False
    cap_chars = max(token_budget // 4, 16) * 4
    if count(text) > token_budget // 4:
        text, truncated = _cut(text, cap_chars), True
    builder = _Builder(
        templates, system, _question_block(templates, text, token, language), token, count, place
    )

    if not sources:
        zone = "abstain"  # no evidence is an abstention, whatever the caller's zone
    chosen = list(sources) if zone != "abstain" else []
    user, fitted, cut = _fit(builder, zone, chosen, token_budget, min_excerpt_chars)
    truncated = truncated or cut
    if not fitted:
        zone, chosen = "abstain", []
        user = builder.user(zone, [], None, False)
        truncated = truncated or bool(sources)
    while builder.cost(user) > token_budget and len(text) > 80:
        text, truncated = _cut(text, len(text) // 2), True
        builder.question_block = _question_block(templates, text, token, language)
        user = builder.user("abstain", [], None, False)  # only an abstention can still be over budget
    tokens = builder.cost(user)
    if tokens > token_budget:
        raise ConfigError(
            f"prompt budget of {token_budget} tokens is too small for the system prompt ({tokens})"
        )
    if truncated:
        log.info(
            "prompt cut to fit %d tokens: %d of %d sources kept", token_budget, len(chosen), len(sources)
        )
    return Prompt(
        messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
        version=templates.version,
        zone=zone,
        sources_used=tuple(chosen) if zone != "abstain" else (),
        truncated=truncated,
        tokens=tokens,
        fence=token,
    )


def _fit(
    builder: _Builder, zone: Zone, chosen: list[Source], budget: int, min_chars: int
) -> tuple[str, bool, bool]:
    """Fit the sources into the budget; returns (user message, fitted, cut). Mutates ``chosen``."""
    user = builder.user(zone, chosen, None, True)
    if zone == "abstain" or builder.cost(user) <= budget:
        return user, True, False
    user = builder.user(zone, chosen, None, False)
    if builder.cost(user) <= budget:
        return user, True, True
    while chosen:
        longest = max(len(s.excerpt) for s in chosen)
        lo, hi = min(min_chars, longest), longest
        if builder.cost(builder.user(zone, chosen, lo, False)) <= budget:
            while lo < hi:  # largest excerpt length that fits
                mid = (lo + hi + 1) // 2
                if builder.cost(builder.user(zone, chosen, mid, False)) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            return builder.user(zone, chosen, lo, False), True, True
        chosen.pop()
    return "", False, True
