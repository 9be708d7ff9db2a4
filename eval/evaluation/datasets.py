"""Question sets for the retrieval eval: JSON Lines, one question a line.

Each line: ``id``, ``question``, ``gold_post_ids``, ``gold_topic_ids``, ``exclude_post_ids`` (posts
hidden from retrieval for that question, e.g. its own first post) and ``tags``. A question tagged
``out_of_domain`` has no gold: it measures abstention.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

OUT_OF_DOMAIN = "out_of_domain"

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

    @property
    def out_of_domain(self) -> bool:
        return OUT_OF_DOMAIN in self.tags

    @property
    def answerable(self) -> bool:
        return not self.out_of_domain and bool(self.gold_post_ids or self.gold_topic_ids)


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
    q = Question(
        id=qid,
        question=text,
        gold_post_ids=_ints(data.get("gold_post_ids"), "gold_post_ids", where),
        gold_topic_ids=_ints(data.get("gold_topic_ids"), "gold_topic_ids", where),
        exclude_post_ids=_ints(data.get("exclude_post_ids"), "exclude_post_ids", where),
        tags=tuple(tags),
    )
    if not q.out_of_domain and not q.answerable:
        raise DatasetError(f"{where}: {qid} has no gold and is not tagged {OUT_OF_DOMAIN}")
    return q


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
