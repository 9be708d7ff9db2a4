"""Question sets for the retrieval eval: JSON Lines, one question a line.

Each line: ``id``, ``question``, ``gold_post_ids``, ``gold_topic_ids``, ``exclude_post_ids`` (posts
hidden from retrieval for that question, e.g. its own first post) and ``tags``. A question tagged
``out_of_domain`` has no gold: it measures abstention.

A question asked in a conversation may also carry ``title`` (its topic's title), ``thread`` (the
topic's earlier posts, oldest first; for a ``follow_up``, the member's earlier question then the
bot's answer last, and what the bot cited then in ``exclude_post_ids``) and ``shape``
(``new_topic``, ``reply_mention``, ``short_direct``, ``follow_up``, …: reported apart). What
retrieval is asked is built by the worker's own function (``worker.question.thread_question``), as
the worker builds it from the forum.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from worker.calibration.questions import SHORT_CHARS, first_sentence  # noqa: F401  (the eval's name)
from worker.question import Question as Asked
from worker.question import thread_question

OUT_OF_DOMAIN = "out_of_domain"
NEAR_DOMAIN = "near_domain"
SHORT = "short"  # a question cut to its first sentence (derived by ``short_form``)
FOLLOW_UP = "follow_up"
BOT = "citebot"  # the bot's name in the questions' mentions (``@citebot``)

# The workplace's shared folder sits beside the checkout (CI copies it there too).
SHARED = Path(__file__).resolve().parents[3] / "shared"
URHO3D = SHARED / "data" / "urho3d"  # the Urho3D forum export and its eval questions


class DatasetError(ValueError):
    """A questions file that cannot be used (bad JSON, missing fields, duplicate ids)."""


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    question: str
    gold_post_ids: tuple[int, ...] = ()
    gold_topic_ids: tuple[int, ...] = ()
    exclude_post_ids: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    fixed_half: str | None = None  # a question kept in one half whatever its id (``fit_only``)
    title: str = ""
    thread: tuple[str, ...] = ()
    shape: str | None = None

    def asked(self, bot_username: str = BOT) -> Asked:
        """The question retrieval is asked: the member's words in their conversation, built as the
        worker builds it."""
        return thread_question(
            self.question,
            bot_username,
            title=self.title,
            thread=self.thread,
            follow_up=self.shape == FOLLOW_UP,
        )

    @property
    def out_of_domain(self) -> bool:
        return OUT_OF_DOMAIN in self.tags

    @property
    def answerable(self) -> bool:
        return not self.out_of_domain and bool(self.gold_post_ids or self.gold_topic_ids)

    @property
    def half(self) -> str:
        return self.fixed_half or half_of(self.id)

    @property
    def slice(self) -> str:
        return slice_of(self.tags)


def half_of(question_id: str) -> str:
    """``fit`` or ``test``: a fixed split by a hash of the id (a question's short form stays in the half
    of its long form). Whatever the eval fits (second-stage weights, zone thresholds) is fitted on
    ``fit``; the figures that judge it are read on ``test``."""
    base = question_id.removesuffix("/short")
    return "fit" if hashlib.sha256(base.encode()).digest()[0] % 2 == 0 else "test"


def slice_of(tags: Sequence[str]) -> str:
    """The group a report shows apart: ``long`` / ``short`` (answerable), ``ood`` / ``near_domain``."""
    if OUT_OF_DOMAIN in tags:
        return NEAR_DOMAIN if NEAR_DOMAIN in tags else "ood"
    return SHORT if SHORT in tags else "long"


def short_form(q: Question) -> Question:
    """An answerable question cut to its first sentence (id ``<id>/short``, tag ``short``)."""
    tags = (*(t for t in q.tags if t != "answerable"), SHORT)
    return replace(q, id=f"{q.id}/short", question=first_sentence(q.question), tags=tags)


def with_short_forms(questions: Sequence[Question]) -> list[Question]:
    """``questions`` plus the short form of each answerable one (a conversation's question is already
    as the member wrote it: it has none)."""
    return [*questions, *(short_form(q) for q in questions if q.answerable and q.shape is None)]


def _ints(value: object, field: str, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise DatasetError(f"{where}: {field} must be a list of integers")
    return tuple(value)


def parse_question(line: str, where: str) -> Question:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise DatasetError(f"{where}: a question must be a JSON object")
    qid, text = data.get("id"), data.get("question")
    if not isinstance(qid, str) or not qid or not isinstance(text, str) or not text.strip():
        raise DatasetError(f"{where}: id and question must be non-empty strings")
    tags = data.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DatasetError(f"{where}: tags must be a list of strings")
    title, thread, shape = data.get("title", ""), data.get("thread") or [], data.get("shape")
    if not isinstance(title, str):
        raise DatasetError(f"{where}: title must be a string")
    if not isinstance(thread, list) or not all(isinstance(t, str) for t in thread):
        raise DatasetError(f"{where}: thread must be a list of strings (the earlier posts, oldest first)")
    if shape is not None and (not isinstance(shape, str) or not shape):
        raise DatasetError(f"{where}: shape must be a non-empty string")
    if shape == FOLLOW_UP and not thread:
        raise DatasetError(f"{where}: a follow_up needs the earlier question in thread")
    q = Question(
        id=qid,
        question=text,
        gold_post_ids=_ints(data.get("gold_post_ids"), "gold_post_ids", where),
        gold_topic_ids=_ints(data.get("gold_topic_ids"), "gold_topic_ids", where),
        exclude_post_ids=_ints(data.get("exclude_post_ids"), "exclude_post_ids", where),
        tags=tuple(tags),
        title=title,
        thread=tuple(thread),
        shape=shape,
    )
    if not q.out_of_domain and not q.answerable:
        raise DatasetError(f"{where}: {qid} has no gold and is not tagged {OUT_OF_DOMAIN}")
    return q


def fit_only(questions: Sequence[Question]) -> list[Question]:
    """``questions`` all in the fit half: extra training questions (out-of-domain ones for the
    abstention model) that are never scored as held-out figures."""
    return [replace(q, fixed_half="fit") for q in questions]


def read_questions(lines: Iterable[str], name: str = "<questions>") -> list[Question]:
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            out.append(parse_question(line, f"{name}:{n}"))
    return out


def load_questions(paths: Sequence[Path]) -> list[Question]:
    """Every question of ``paths``, in order; ids must be unique across the files."""
    questions: list[Question] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            questions.extend(read_questions(fh, str(path)))
    seen: set[str] = set()
    for q in questions:
        if q.id in seen:
            raise DatasetError(f"duplicate question id {q.id!r}")
        seen.add(q.id)
    return questions
