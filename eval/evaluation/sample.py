"""A small forum export for smoke runs: the gold topics of some questions plus distractor topics.

Files are symlinked from the full export (nothing copied); distractors are spread evenly over the
topic ids so that they are not all of one period of the forum.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from eval.evaluation.datasets import Question


def sample_topics(export: Path, questions: Sequence[Question], distractors: int) -> list[int]:
    gold = {t for q in questions for t in q.gold_topic_ids}
    others = sorted(int(p.stem) for p in (export / "topics").glob("*.json") if int(p.stem) not in gold)
    step = max(1, len(others) // max(1, distractors))
    return sorted(gold | set(others[::step][:distractors]))


def make_sample_export(export: Path, questions: Sequence[Question], distractors: int, dest: Path) -> Path:
    """``dest`` with ``topics/`` and ``raw/`` links for the chosen topics; returns ``dest``."""
    for sub in ("topics", "raw"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    for tid in sample_topics(export, questions, distractors):
        for sub, ext in (("topics", "json"), ("raw", "md")):
            src, dst = export / sub / f"{tid}.{ext}", dest / sub / f"{tid}.{ext}"
            if src.exists() and not dst.exists():
                dst.symlink_to(src.resolve())
    return dest
