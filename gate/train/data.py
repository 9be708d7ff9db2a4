"""The labelled lines the gate's two learned heads are fitted on: one list, for both.

The lexical head (``gate.train.lexical``) and the embedding layer's linear head (``gate.train.intent``),
both refitted by ``make gate`` (``python -m gate.build``), learn from the same lines. Every labelled
set lives in ``eval/data/gate/`` (its README gives each set's size, role, readers and history), in
two folders by role:

- ``training/``: everything the heads are fitted on, in this order: the embedding layer's exemplars
  (``exemplars.jsonl``: ``label`` is a category or ``benign``), the first regression sets
  (``REGRESSION_SETS``: ``expect`` block/pass, ``category``), the held-out sets already tuned on
  (``TUNED_HELDOUT``: each was scored once before any change was written from it, then became
  training data) and the sets written for the heads by helpers who never saw the rules
  (``gate-train-*.jsonl``);
- ``untouched/``: the held-out sets never fitted on and never written from (``UNTUNED_HELDOUT``):
  measures only. The training code reads them only to leave out any training line that repeats one
  of theirs (a test checks it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gate.intent import BENIGN

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data"
"""The data beside the clone (not in the repository): the forum archive and the probe file."""
PROBES = DATA / "gate-probes-dev.jsonl"
FORUM = DATA / "urho3d"
LABELLED = REPO / "eval" / "data" / "gate"
"""Every labelled set of the gate, by role (its README is the table of them)."""
TRAINING = LABELLED / "training"
UNTOUCHED = LABELLED / "untouched"
EXEMPLARS = TRAINING / "exemplars.jsonl"
FLOORS = LABELLED / "floors.toml"
"""The recorded floor of each held-out set (``tests/gate/test_floors.py``)."""
REGRESSION_SETS = (
    "blind-1.jsonl",
    "blind-2.jsonl",
    "blind-3.jsonl",
    "blind-5.jsonl",
    "cases-v2.jsonl",
    "cases-v3.jsonl",
    "cases.jsonl",
    "dev-3.jsonl",
    "heldout.jsonl",
)
"""The sets written with the rules (``tests/gate/`` until issue 34): training data, and most of them
regression sets the gate's tests check line by line (the README says which)."""
TUNED_HELDOUT = (
    "blind-4.jsonl",
    "blind-6.jsonl",
    "blind-7.jsonl",
    "blind-8.jsonl",
    "blind-9.jsonl",
    "blind-11.jsonl",
    "blind-13.jsonl",
    "blind-14.jsonl",
    "blind-15.jsonl",
    "blind-16.jsonl",
    "blind-17.jsonl",
    "blind-18.jsonl",
    "blind-19.jsonl",
    "blind-20.jsonl",
    "blind-21.jsonl",
    "blind-22.jsonl",
    "blind-23.jsonl",
    "blind-24.jsonl",
    "blind-25.jsonl",
    "blind-32.jsonl",
    "blind-33.jsonl",
    "blind-36.jsonl",
    "blind-37.jsonl",
    "blind-40.jsonl",
    "blind-42.jsonl",
)
"""Held-out sets scored once and then tuned on (regression sets now): training data too. Blind 4, 6
and 8 joined in the fourth session (the brief allowed sets 4-9), blind 11 after its first score, blind
13 in the sixth session (scored exactly once in the fifth), blind 14 to 17 in the eighth (scored at
the start and end of sessions 6 and 7; fresh blind sets, the lead's, replace them as measures), blind
18 to 21 in the ninth (scored at the start and end of the eighth), blind 22 to 25 in the ninth after
their first scores (blind 26 and 27 stay outside the repository, the session's untouched measure),
blind 32, 33, 36 and 37 in the tenth after their first scores (blind 30, 31, 34 and 35 stay outside,
untouched), blind 40 and 42 in the eleventh after their first scores (blind 38, 39, 41 and 43 stay
outside, untouched)."""
UNTUNED_HELDOUT = (
    "blind-10.jsonl",
    "blind-12.jsonl",
    "blind-43.jsonl",
    "blind-44.jsonl",
)
"""Held-out sets never fitted on (in ``untouched/``): measures only."""
CATEGORY_ALIASES = {"other": "crime"}


@dataclass(frozen=True, slots=True)
class Labelled:
    """One training line: ``category`` is None for a benign line; ``source`` the file it came from."""

    text: str
    category: str | None
    source: str

    @property
    def harmful(self) -> bool:
        return self.category is not None


def written_files() -> list[Path]:
    """The training sets written for the heads (``training/gate-train-*.jsonl``), sorted."""
    return sorted(TRAINING.glob("gate-train-*.jsonl"))


def labelled_files() -> list[Path]:
    """The JSON Lines files (``expect``/``category`` lines) of the training data, in a fixed order
    (the fits are deterministic for a given order): the regression sets, the tuned held-out sets,
    the written training sets."""
    return [TRAINING / name for name in (*REGRESSION_SETS, *TUNED_HELDOUT)] + written_files()


def untouched_files() -> list[Path]:
    """The untouched held-out sets (``UNTUNED_HELDOUT``), never fitted on."""
    return [UNTOUCHED / name for name in UNTUNED_HELDOUT]


def read_set(path: Path) -> list[Labelled]:
    """One ``expect``/``category`` file as training lines (a harmful line without a category is
    ``crime``, the catch-all)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        category = None
        if row["expect"] == "block":
            category = row.get("category") or "crime"
            category = CATEGORY_ALIASES.get(category, category)
        rows.append(Labelled(row["text"], category, path.name))
    return rows


def exemplars_text() -> str:
    """The embedding layer's exemplars (``training/exemplars.jsonl``), as written."""
    return EXEMPLARS.read_text(encoding="utf-8")


def exemplar_rows() -> list[Labelled]:
    """The embedding layer's exemplars as training lines."""
    rows = []
    for line in exemplars_text().splitlines():
        if line.strip():
            row = json.loads(line)
            category = None if row["label"] == BENIGN else str(row["label"])
            rows.append(Labelled(row["text"], category, "exemplars.jsonl"))
    return rows


def training_rows() -> list[Labelled]:
    """Every line the heads learn from: the exemplars first, then :func:`labelled_files` in order;
    a line whose text is also in an untuned held-out set is left out (generic wordings such as
    "ignore all previous instructions" recur across sets, and a measure must not be fitted on)."""
    measured = {row.text.casefold().strip() for path in untouched_files() for row in read_set(path)}
    rows = exemplar_rows()
    for path in labelled_files():
        rows += read_set(path)
    return [row for row in rows if row.text.casefold().strip() not in measured]


def cooked_to_text(cooked: str) -> str:
    """Discourse cooked HTML to plain text on one line (``worker.html_text``, whitespace collapsed)."""
    from worker.html_text import html_to_text

    return " ".join(html_to_text(cooked).split())


def forum_questions(root: Path = FORUM, limit: int = 1000) -> list[str]:
    """Dev questions first, then first posts of the remaining topics, ``limit`` in all."""
    questions: list[str] = []
    seen: set[int] = set()
    dev = root / "eval" / "questions-dev.jsonl"
    for line in dev.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        questions.append(row["question"])
        seen.update(int(t) for t in row["gold_topic_ids"])
    for topic_id, text in _first_posts(root / "topics"):
        if len(questions) >= limit:
            break
        if topic_id not in seen:
            questions.append(text)
    return questions[:limit]


def _first_posts(folder: Path) -> Iterator[tuple[int, str]]:
    for path in sorted(folder.glob("*.json"), key=lambda p: int(p.stem)):
        topic = json.loads(path.read_text(encoding="utf-8"))
        posts = topic.get("post_stream", {}).get("posts", [])
        if posts and posts[0].get("post_number") == 1:
            yield int(topic["id"]), cooked_to_text(posts[0].get("cooked", ""))


def archive_posts(root: Path = FORUM) -> tuple[list[int], list[str]]:
    """(id, text) of every post of the Urho3D archive, cooked HTML to text."""
    ids: list[int] = []
    texts: list[str] = []
    for path in sorted((root / "topics").glob("*.json"), key=lambda p: int(p.stem)):
        for post in json.loads(path.read_text(encoding="utf-8"))["post_stream"]["posts"]:
            text = cooked_to_text(post.get("cooked", ""))
            if text:
                ids.append(int(post["id"]))
                texts.append(text)
    return ids, texts
