"""``OfflineGenerator``: a deterministic, extractive ``ChatModel`` that needs no LLM.

It serves the demo and the tests, and it is what answers when no LLM is configured. For each of the top
sources it picks the sentence that best overlaps the question's words, quotes the best few as a list,
in the sources' order (``[[1]]`` before ``[[3]]``, as a reader expects), and cites each with its own
``[[n]]``; in the abstain zone it says it does not know and how to ask the forum. What it quotes:

- answers, never questions: a source that is its topic's question (post #1, the prompt's ``Post:`` line)
  is quoted only through its replies among the nearby posts, and a sentence that asks something (ends
  in ``?``) is never quoted;
- code as code: a word that reads as code (``GetSubsystem<ResourceCache>()``, ``node->Translate()``,
  ``a::b``) is put in an inline code span, so the sanitizer shows it literally instead of taking
  ``<ResourceCache>`` for an HTML tag.

It can only cite numbers present in the evidence it was given, so it never invents a source; sources
scored below the zone's floor never reach it (``build_prompt(floor=...)``). Its own sentences are
French for a question written in French, else English (the quotes stay as written), and fit the place
the member asked from (``worker.generation.wording``; the prompt's evidence line says which). When no
source holds a sentence to quote, it lists the closest topics by title, cited, instead of "I found
nothing". Replies carry
``Completion.offline = True``; the pipeline appends :data:`OFFLINE_FOOTER` so readers know.

``complete(messages)`` reads the fenced evidence block that :func:`~worker.generation.prompt.build_prompt`
wrote; ``complete_from(question, sources, zone)`` takes the structured sources directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import regex

from gate import detect_language
from worker.domain import Completion, Source, Zone
from worker.generation import fence
from worker.generation.wording import PLACES, Place, Wording, wording
from worker.retrieval.stopwords import STOP_WORDS

OFFLINE_MODEL = "offline-extractive"
ENGLISH = wording("en")
FRENCH = wording("fr")
OFFLINE_FOOTER = ENGLISH.offline_footer
OFFLINE_NOTE = ENGLISH.offline_note
"""The English label of an offline reply that cites nothing (an abstention); ``offline_label`` picks."""
ABSTAIN_TEXT = ENGLISH.abstain


def phrases_for(question: str, place: Place = "new_topic") -> Wording:
    """The sentences for the question's language (``gate.detect_language``) at ``place``."""
    return wording(detect_language(question), place)


def offline_label(language: str, cited: bool) -> str:
    """The label the pipeline appends to an offline reply, in the question's language."""
    said = wording(language)
    return said.offline_footer if cited else said.offline_note


_NEARBY = re.compile(r"#(\d+): (.*)", re.DOTALL)
_POST_LINE = re.compile(r"Post: #(\d+), ")
# A word that reads as code: a call, a template argument, a member or scope access, an assignment.
_CODE_WORD = re.compile(r"[\w)\]]<\w|\w\(|::|->|[{};=]|\w\.\w+\(")
_EDGE_PUNCT = ".,;:!?\"'"
_EVIDENCE = re.compile(
    r"<<<EVIDENCE zone=(normal|weak|abstain)(?: place=(new_topic|reply|pm))? id=([0-9a-f]{8,64})>>>"
)
_WORD = regex.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_BULLET = re.compile(r"^\s*(?:[-*+>•]|\d+[.)])\s+")
MAX_POINTS = 3
SOURCES_READ = 6
MAX_SENTENCE_CHARS = 300


@dataclass(frozen=True, slots=True)
class _Evidence:
    n: int
    title: str
    text: str
    question: bool = False  # the topic's first post: quoted only through its replies
    nearby: tuple[str, ...] = ()  # "#k: text" lines of the topic's nearby posts

    def answer_text(self) -> str:
        """The text an answer may be quoted from: the post itself, or a question's replies."""
        if not self.question:
            return self.text
        replies = (m.group(2) for m in map(_NEARBY.match, self.nearby) if m and m.group(1) != "1")
        return "\n".join(replies)


def _stems(text: str) -> set[str]:
    words = (w.casefold() for w in _WORD.findall(text))
    return {w[:6] for w in words if len(w) >= 3 and w not in STOP_WORDS and not w.isdigit()}


def _sentences(text: str) -> list[str]:
    """The quotable sentences of ``text``: not too short, not a fence line, not a question."""
    out = []
    for raw in _SENTENCE_END.split(text):
        sentence = _BULLET.sub("", raw).strip()
        if len(sentence) < 20 or sentence.startswith("```") or sentence.endswith("?"):
            continue
        if len(sentence) > MAX_SENTENCE_CHARS:
            cut = sentence[:MAX_SENTENCE_CHARS]
            sentence = cut[: cut.rfind(" ")] + " …" if " " in cut else cut + " …"
        out.append(sentence)
    return out


def code_spans(sentence: str) -> str:
    """``sentence`` with each run of code-like words in one inline code span (punctuation outside)."""
    words = sentence.split(" ")
    out: list[str] = []
    run: list[str] = []

    def flush(tail: str = "") -> None:
        if run:
            out.append(f"`{' '.join(run)}`{tail}")
            run.clear()

    for word in words:
        core = word.rstrip(_EDGE_PUNCT) if not word.endswith(")") else word
        tail = word[len(core) :]
        if "`" not in core and _CODE_WORD.search(core) and any(c.isalnum() for c in core):
            run.append(core)
            if tail:
                flush(tail)
            continue
        flush()
        out.append(word)
    flush()
    return " ".join(out)


class OfflineGenerator:
    """An extractive ``ChatModel``: quotes and cites the evidence, never calls a model."""

    @property
    def name(self) -> str:
        return OFFLINE_MODEL

    def complete(self, messages: Sequence[dict[str, str]]) -> Completion:
        """Answer from the fenced evidence and question in the last user message."""
        user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
        found = _EVIDENCE.search(user)
        if found is None:
            return self._answer(user, [], "abstain")
        zone, token = cast(Zone, found.group(1)), re.escape(found.group(3))
        place = cast(Place, found.group(2)) if found.group(2) in PLACES else "new_topic"
        evidence = []
        pattern = rf"<<<SOURCE \[\[(\d+)\]\] id={token}>>>\n(.*?)\n<<<END SOURCE \[\[\1\]\] id={token}>>>"
        for m in re.finditer(pattern, user, flags=re.DOTALL):
            title, _, rest = m.group(2).partition("\n")
            post = _POST_LINE.match(rest)
            if post is not None:
                rest = rest.partition("\n")[2]
            body = rest.removeprefix("Excerpt:\n")
            excerpt, _, nearby = body.partition("\nNearby posts in the same topic:\n")
            evidence.append(
                _Evidence(
                    int(m.group(1)),
                    title.removeprefix("Title: "),
                    excerpt,
                    question=post is not None and post.group(1) == "1",
                    nearby=tuple(line.removeprefix("- ") for line in nearby.split("\n") if line),
                )
            )
        q = re.search(rf"<<<QUESTION id={token}>>>\n(.*?)\n<<<END QUESTION id={token}>>>", user, re.DOTALL)
        return self._answer(q.group(1) if q else "", evidence, zone, place)

    def complete_from(
        self, question: str, sources: Sequence[Source], zone: Zone, place: Place = "new_topic"
    ) -> Completion:
        """Answer from structured sources (best first), as asked at ``place``."""
        evidence = [
            _Evidence(
                s.n,
                fence.one_line(s.title),
                fence.neutralise(s.excerpt),
                question=s.post_number == 1,
                nearby=tuple(fence.one_line(c) for c in s.context),
            )
            for s in sources
        ]
        return self._answer(question, evidence, zone, place)

    def _answer(
        self, question: str, evidence: Sequence[_Evidence], zone: Zone, place: Place = "new_topic"
    ) -> Completion:
        say = phrases_for(question, place)
        if zone == "abstain" or not evidence:
            return Completion(text=say.abstain, model=OFFLINE_MODEL, offline=True)
        wanted = _stems(question)
        picks: list[tuple[float, int, str, int]] = []  # (-score, rank, sentence, n)
        for rank, source in enumerate(evidence[:SOURCES_READ]):
            best: tuple[float, str] | None = None
            for sentence in _sentences(source.answer_text()):
                have = _stems(sentence)
                score = len(wanted & have) / math.sqrt(len(have) + 1)
                if best is None or score > best[0]:
                    best = (score, sentence)
            if best is not None and best[0] > 0:
                picks.append((-best[0], rank, best[1], source.n))
        if not picks:
            first = next(((s.n, found) for s in evidence if (found := _sentences(s.answer_text()))), None)
            if first is None:
                # Nothing to quote ("works, thanks" under a title that matches): the closest topics
                # are still worth a link, never an "I found nothing".
                return Completion(text=_closest(say, evidence), model=OFFLINE_MODEL, offline=True)
            picks = [(0.0, 0, first[1][0], first[0])]
        # The best few by overlap, then in the sources' reading order.
        chosen = sorted(sorted(picks)[:MAX_POINTS], key=lambda pick: pick[1])
        points = [f"- {code_spans(fence.neutralise(sentence))} [[{n}]]" for _, _, sentence, n in chosen]
        intro = say.weak_intro if zone == "weak" else say.normal_intro
        parts = [intro, "\n".join(points)] + ([say.weak_outro] if zone == "weak" else [])
        return Completion(text="\n\n".join(parts), model=OFFLINE_MODEL, offline=True)


def closest_topics(sources: Sequence[Source], language: str, place: Place = "new_topic") -> str:
    """The closest topics by title, each cited with its ``[[n]]``, in ``language`` at ``place``: what a
    weak-zone reply that cites nothing gets instead of a bare "I found nothing"."""
    evidence = [_Evidence(s.n, fence.one_line(s.title), "") for s in sources]
    return _closest(wording(language, place), evidence)


def _closest(say: Wording, evidence: Sequence[_Evidence]) -> str:
    """The closest topics by title, each cited, for evidence that holds no sentence to quote."""
    seen: set[str] = set()
    lines = []
    for source in evidence[:SOURCES_READ]:
        title = source.title.strip()
        if title and title.casefold() not in seen:
            seen.add(title.casefold())
            lines.append(f"- {code_spans(title)} [[{source.n}]]")
    return "\n\n".join([say.closest, "\n".join(lines[:MAX_POINTS]), say.weak_outro])
