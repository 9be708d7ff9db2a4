"""The questions ``citebot calibrate`` fits on, built from the forum's own solved topics.

Each topic with an accepted answer (the solved plugin's flag) gives one question: its opening post as
a member would ask it of the bot in a mention (the worker's builder, ``worker.question.thread_question``,
without the topic's title: the title would match every post of the gold topic, which the index embeds
with its title), and its short form (the first sentence that says something, ``first_sentence``: what a
member writes to a bot in one line). Gold: the accepted answer post(s) and the topic; the opening post
itself is hidden from retrieval. Out-of-domain questions (English and French, shipped beside this
module: ``ood-en.jsonl``, ``ood-fr.jsonl``) are the abstention score's negatives.

The fit / test split is a fixed hash of the topic id (``half_of_topic``), so a question's long and short
forms are always in the same half; an out-of-domain question's half is a hash of its id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Literal, Protocol

from worker.html_text import html_to_text
from worker.question import thread_question

Half = Literal["fit", "test"]
SHORT = "/short"  # the id suffix of a short form
SHORT_CHARS = 160
OOD_FILES = ("ood-en.jsonl", "ood-fr.jsonl")
BOT = "citebot"


class SolvedPost(Protocol):
    """What a question is built from: a post as the backfill's sources read it (``SourcePost``)."""

    @property
    def post_id(self) -> int: ...
    @property
    def topic_id(self) -> int: ...
    @property
    def post_number(self) -> int: ...
    @property
    def cooked(self) -> str: ...
    @property
    def accepted_answer(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class CalibrationQuestion:
    id: str  # ``topic-<id>`` (``/short`` for the short form) or ``ood-<lang>-<n>``
    text: str  # what retrieval is asked
    gold_post_ids: tuple[int, ...] = ()
    topic_id: int | None = None  # None: out of domain
    exclude_post_ids: tuple[int, ...] = ()
    language: str = ""

    @property
    def answerable(self) -> bool:
        return self.topic_id is not None

    @property
    def short(self) -> bool:
        return self.id.endswith(SHORT)

    @property
    def half(self) -> Half:
        return half_of_topic(self.topic_id) if self.topic_id is not None else half_of_key(self.id)


def half_of_key(key: str) -> Half:
    """``fit`` or ``test`` by the first byte of the SHA-256 of ``key`` (fixed: the same on every run)."""
    return "fit" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "test"


def half_of_topic(topic_id: int) -> Half:
    """The half of every question built from topic ``topic_id`` (its long and short forms alike)."""
    return half_of_key(f"topic:{topic_id}")


# Greetings and thanks that open a post and say nothing about the question.
_GREETING = re.compile(
    r"^\s*(?:(?:hi|hello|hey|greetings|good (?:morning|evening|day)|dear \w+|bonjour|salut|hi all|"
    r"hello all|hello everyone|hi everyone|hi guys|hello guys|hi folks|hey guys|thanks?(?: you)?|"
    r"first of all|so|ok|well)\b[\s,!.:;\-–—]*(?:all|everyone|everybody|guys|folks|there|people)?"
    r"[\s,!.:;\-–—]*)+",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n+")
_MIN_WORDS = 4


def first_sentence(text: str, limit: int = SHORT_CHARS) -> str:
    """The question as a member would write it to a bot: the first sentence of the post that says
    something (greetings dropped; a sentence under four words takes the next one with it), cut at a
    word to at most ``limit`` characters."""
    parts = [p.strip() for p in _SENTENCE_END.split(text) if p and p.strip()]
    out = ""
    for part in parts:
        part = _GREETING.sub("", part).strip()
        if not part or (not out and len(part.split()) < 2 and not part.endswith("?")):
            continue
        out = f"{out} {part}".strip()
        if len(out.split()) >= _MIN_WORDS:
            break
    out = " ".join(out.split()) or " ".join(text.split())
    if len(out) <= limit:
        return out
    cut = out[: limit + 1].rsplit(" ", 1)[0]
    return cut if cut else out[:limit]


def asked(text: str, bot_username: str = BOT) -> str:
    """What retrieval is asked for a member's post ``text`` mentioning the bot, with no title."""
    return thread_question(text, bot_username).text


def solved_questions(
    posts: Iterable[SolvedPost], *, bot_username: str = BOT, short: bool = True
) -> list[CalibrationQuestion]:
    """One question per topic of ``posts`` whose opening post is there and that has an accepted answer
    among them (other than the opening post), with its short form (``short``), in topic id order.
    A topic whose opening post says too little to ask (empty once cleaned) is left out."""
    opening: dict[int, SolvedPost] = {}
    accepted: dict[int, list[int]] = {}
    for p in posts:
        if p.post_number == 1:
            opening[p.topic_id] = p
        elif p.accepted_answer:
            accepted.setdefault(p.topic_id, []).append(p.post_id)
    out: list[CalibrationQuestion] = []
    for topic_id in sorted(set(opening) & set(accepted)):
        first = opening[topic_id]
        words = html_to_text(first.cooked).strip()
        text = asked(words, bot_username) if words else ""
        if not text.strip():
            continue
        q = CalibrationQuestion(
            id=f"topic-{topic_id}",
            text=text,
            gold_post_ids=tuple(sorted(accepted[topic_id])),
            topic_id=topic_id,
            exclude_post_ids=(first.post_id,),
        )
        out.append(q)
        if short:
            brief = asked(first_sentence(words), bot_username)
            if brief.strip():
                out.append(replace(q, id=f"{q.id}{SHORT}", text=brief))
    return out


def shipped_out_of_domain(bot_username: str = BOT) -> list[CalibrationQuestion]:
    """The out-of-domain questions shipped with citebot (English and French: ``OOD_FILES``)."""
    out = []
    for name in OOD_FILES:
        text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
        out.extend(read_out_of_domain(text.splitlines(), name))
    return [replace(q, text=asked(q.text, bot_username)) for q in out]


def read_out_of_domain(lines: Sequence[str], name: str) -> list[CalibrationQuestion]:
    """Questions of a JSON Lines file of out-of-domain questions (``id``, ``question``, ``language``)."""
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not row.get("id") or not str(row.get("question", "")).strip():
            raise ValueError(f"{name}:{n}: expected an object with id and question")
        out.append(
            CalibrationQuestion(
                id=str(row["id"]), text=str(row["question"]), language=str(row.get("language", ""))
            )
        )
    return out
