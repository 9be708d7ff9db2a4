"""Stage 3: from ranked candidates to the numbered sources ``[[1]]``…``[[n]]`` the LLM cites.

Dedupe by topic (the first — best-ranked — post of each topic wins), keep ``sources_k``, number them
from 1. Optional neighbour posts (± n post numbers in the same topic) travel as context: they help the
LLM read a terse answer, but they are never citable on their own.

Then the zone of the evidence (the same stage of the answer path), from its top-1 score, with
thresholds that belong to the scorer that produced it:
``< abstain_below`` → abstain · ``[abstain_below, weak_below)`` → weak · ``>= weak_below`` → normal.
No score (no reranker, reranker down, legacy path) means normal: the bot then behaves as it did before
the reranker existed ("config B" of the seed). A non-finite score is treated as no score.

A logit of one reranker means nothing to another: the seed's −4 / 0 are a real cross-encoder's
logits, while the local model server's calibrated bi-encoder never goes below about −4. So the
thresholds are data per scorer id (``zone_thresholds.json`` beside this module; for a TEI reranker the
id is what its ``/info`` reports, see ``TeiReranker.reranker_id``): ``python -m eval retrieval
--write-thresholds`` writes the ones it calibrated, the worker reads the ones of the scorer it talks to.
A scorer the table does not know gets the seed's −4 / 0. ``CITEBOT_RETRIEVAL__ABSTAIN_BELOW`` /
``WEAK_BELOW``, when set, override the table for every scorer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from worker.domain import Candidate, Source, Zone

EXCERPT_CHARS = 1200


def dedupe_by_topic(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Keep the first candidate of each topic, in the given (best-first) order."""
    seen: set[int] = set()
    kept: list[Candidate] = []
    for cand in candidates:
        if cand.topic_id in seen:
            continue
        seen.add(cand.topic_id)
        kept.append(cand)
    return kept


def excerpt(text: str, limit: int) -> str:
    """At most ``limit`` characters, whitespace collapsed, cut at a word boundary with an ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0]
    return cut + "…"


def score_of(cand: Candidate) -> float | None:
    """The score that ordered a candidate: its rerank logit, else its fused RRF score, else its cosine."""
    for value in (cand.logit, cand.fused, cand.cosine):
        if value is not None:
            return value
    return None


def build_sources(
    candidates: Sequence[Candidate],
    sources_k: int,
    *,
    excerpt_chars: int = EXCERPT_CHARS,
    context: Mapping[int, Sequence[Candidate]] | None = None,
) -> list[Source]:
    """Numbered sources from best-first candidates: deduped by topic, ``sources_k`` at most.

    ``context`` maps a post id to its neighbour posts (see ``neighbours_for``).
    """
    sources = []
    for n, cand in enumerate(dedupe_by_topic(candidates)[:sources_k], start=1):
        around = (context or {}).get(cand.post_id, ())
        sources.append(
            Source(
                n=n,
                post_id=cand.post_id,
                topic_id=cand.topic_id,
                post_number=cand.post_number,
                slug=cand.topic_slug,
                title=cand.topic_title,
                excerpt=excerpt(cand.body, excerpt_chars),
                score=score_of(cand),
                context=tuple(f"#{c.post_number}: {excerpt(c.body, excerpt_chars // 2)}" for c in around),
            )
        )
    return sources


def replies_for_questions(
    kept: Sequence[Candidate],
    ranked: Sequence[Candidate],
    context: Mapping[int, Sequence[Candidate]],
    fetch: Callable[[int, int, int], Sequence[Candidate]] | None = None,
) -> dict[int, list[Candidate]]:
    """Context for each source that is its topic's question (post #1) and has none yet: the topic's
    best-ranked reply among ``ranked``, else (with ``fetch``) the post after it.

    A question post often wins its topic (it reads like the member's question), and dedupe then drops
    the reply that answers it; the reply travels as the question's context, so the answer is in the
    prompt, and the offline generator quotes it instead of the question.
    """
    out: dict[int, list[Candidate]] = {}
    for cand in kept:
        if cand.post_number != 1 or context.get(cand.post_id):
            continue
        reply = next((r for r in ranked if r.topic_id == cand.topic_id and r.post_number > 1), None)
        if reply is not None:
            out[cand.post_id] = [reply]
        elif fetch is not None:
            after = [r for r in fetch(cand.topic_id, 1, 1) if r.post_number > 1]
            if after:
                out[cand.post_id] = after[:1]
    return out


def neighbours_for(
    candidates: Sequence[Candidate], n: int, fetch: Callable[[int, int, int], Sequence[Candidate]]
) -> dict[int, list[Candidate]]:
    """``fetch(topic_id, post_number, n)`` for each candidate: post id → its neighbours."""
    if n <= 0:
        return {}
    return {c.post_id: list(fetch(c.topic_id, c.post_number, n)) for c in candidates}


# -- zones -------------------------------------------------------------------------------------------

THRESHOLDS_FILE = Path(__file__).with_name("zone_thresholds.json")
SEED_ABSTAIN_BELOW = -4.0  # the seed's thresholds, for a real cross-encoder (mmarco-mMiniLMv2 logits)
SEED_WEAK_BELOW = 0.0


@dataclass(frozen=True, slots=True)
class Thresholds:
    abstain_below: float = SEED_ABSTAIN_BELOW
    weak_below: float = SEED_WEAK_BELOW
    source: str = "seed (a real cross-encoder's logits)"

    def __post_init__(self) -> None:
        if self.abstain_below > self.weak_below:
            raise ValueError("abstain_below must not be above weak_below")


SEED = Thresholds()


def assign_zone(top_logit: float | None, abstain_below: float = -4.0, weak_below: float = 0.0) -> Zone:
    """The zone of the evidence whose best score is ``top_logit``."""
    if abstain_below > weak_below:
        raise ValueError("abstain_below must not be above weak_below")
    if top_logit is None or not math.isfinite(top_logit):
        return "normal"
    if top_logit < abstain_below:
        return "abstain"
    if top_logit < weak_below:
        return "weak"
    return "normal"


def read_table(path: Path = THRESHOLDS_FILE) -> dict[str, Any]:
    """The thresholds file as a dict (``{"scorers": {id: {abstain_below, weak_below, ...}}}``)."""
    if not path.is_file():
        return {"scorers": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("scorers"), dict):
        raise ValueError(f"{path}: expected an object with a 'scorers' object")
    return data


@lru_cache(maxsize=8)
def _table(path: Path) -> Mapping[str, Thresholds]:
    out: dict[str, Thresholds] = {}
    for scorer, row in read_table(path)["scorers"].items():
        out[str(scorer)] = Thresholds(
            float(row["abstain_below"]), float(row["weak_below"]), source=f"calibrated for {scorer}"
        )
    return out


def thresholds_for(
    scorer_id: str | None,
    *,
    abstain_below: float | None = None,
    weak_below: float | None = None,
    path: Path = THRESHOLDS_FILE,
    base: Thresholds | None = None,
) -> Thresholds:
    """The thresholds for ``scorer_id``: ``base`` when given (a calibration's), else the table's row,
    else the seed's; explicit settings win."""
    base = base if base is not None else _table(path).get(scorer_id or "", SEED)
    if abstain_below is None and weak_below is None:
        return base
    return Thresholds(
        base.abstain_below if abstain_below is None else abstain_below,
        base.weak_below if weak_below is None else weak_below,
        source="settings (CITEBOT_RETRIEVAL__ABSTAIN_BELOW / WEAK_BELOW)",
    )


def write_thresholds(
    scorer_id: str,
    abstain_below: float,
    weak_below: float,
    figures: Mapping[str, Any],
    path: Path = THRESHOLDS_FILE,
) -> None:
    """Record calibrated thresholds for ``scorer_id`` (other scorers' rows are kept)."""
    Thresholds(abstain_below, weak_below)  # validates the order
    data = read_table(path)
    data["scorers"][scorer_id] = {
        "abstain_below": round(abstain_below, 3),
        "weak_below": round(weak_below, 3),
        **figures,
    }
    data["scorers"] = dict(sorted(data["scorers"].items()))
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _table.cache_clear()
