"""``calibration_work``: what a run of ``citebot calibrate`` has collected, saved as it goes.

Asking every calibration question of the second stage is a run's long part after reading the forum
(one embedding and a few queries per question, a thousand questions or more on a large forum). Each
question's candidates and features (``worker.calibration.fit.CandidateRow``) are saved as soon as they
are collected, one row per question (migration 0016), so that a run stopped for any reason (Ctrl-C,
SIGTERM, a crash, the embedder going away) is continued by the same command: the saved questions are
not asked again, and the fit is the one an uninterrupted run would have made (the rows are the same
numbers, in the same order).

Saved work is reused only where it would come out the same:

- the same question: ``question_key`` hashes its id, text, gold posts, topic and hidden posts (a
  solved topic whose opening post was edited, or whose accepted answer changed, is asked again);
- the same conditions: ``context_key`` hashes the model set, the index's identity (``index_meta``:
  the models, dimensions, recipe and vector index kind), the retrieval settings the candidates depend
  on and the feature list; rows under another context are deleted when a run starts;
- an index that has not moved much: once more than ``STALE_SHARE`` of the indexed posts were written
  since the oldest saved row (a reindex, a large backfill), the model set's saved work is deleted and
  the run starts again. A live forum's trickle of new posts stays under it: an uninterrupted run sees
  the index change while it runs just the same.

A run that records its outcome (``stage_calibrations``) deletes its model set's saved work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from worker.calibration.fit import CandidateRow
from worker.calibration.questions import CalibrationQuestion
from worker.retrieval.stage import FEATURES

log = logging.getLogger(__name__)

STALE_SHARE = 0.01  # more of the index than this rewritten since the work was saved: start again


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def question_key(q: CalibrationQuestion) -> str:
    """What identifies a question's saved work: everything its candidates and labels depend on."""
    return _digest([q.id, q.text, list(q.gold_post_ids), q.topic_id, list(q.exclude_post_ids)])


def index_identity(conn: psycopg.Connection) -> dict[str, Any]:
    """The index's identity as ``index_meta`` records it (its models, dimensions, recipe, vector index
    kind), without its date."""
    row = conn.execute("SELECT to_jsonb(m) - 'updated_at' FROM index_meta m").fetchone()
    return dict(row[0]) if row and isinstance(row[0], dict) else {}


def context_key(model_set: str, index: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """What else a question's candidates depend on: the model set, the index, the retrieval settings
    (any change asks the questions again) and the features collected."""
    return _digest([model_set, dict(index), dict(settings), list(FEATURES)])


def _encode(rows: Sequence[CandidateRow]) -> dict[str, Any]:
    # jsonb has no NaN (a post without an excerpt vector): null stands for it; floats round-trip exactly
    return {
        "features": list(FEATURES),
        "rows": [
            [post, topic, label, gold, [None if math.isnan(v) else v for v in x]]
            for post, topic, label, gold, x in rows
        ],
    }


def _decode(body: Mapping[str, Any]) -> list[CandidateRow] | None:
    if list(body.get("features") or ()) != list(FEATURES):
        return None
    return [
        (int(post), int(topic), float(label), float(gold), [math.nan if v is None else float(v) for v in x])
        for post, topic, label, gold, x in body.get("rows") or ()
    ]


class SavedWork:
    """The saved questions of one model set under one context (module docstring)."""

    def __init__(self, conn: psycopg.Connection, model_set: str, context: str) -> None:
        self._conn = conn
        self.model_set = model_set
        self.context = context

    def prepare(self) -> int:
        """Delete what cannot be reused (another context; an index rewritten past ``STALE_SHARE``);
        how many saved questions are left."""
        with self._conn.transaction():
            gone = self._conn.execute(
                "DELETE FROM calibration_work WHERE model_set = %s AND context <> %s",
                (self.model_set, self.context),
            ).rowcount
            if gone:
                log.info("calibrate %s: %d saved questions of other settings deleted", self.model_set, gone)
            row = self._conn.execute(
                "SELECT count(*), min(saved_at) FROM calibration_work WHERE model_set = %s", (self.model_set,)
            ).fetchone()
            kept, since = (int(row[0]), row[1]) if row else (0, None)
            if kept and since is not None:
                moved = self._conn.execute(
                    "SELECT count(*) FILTER (WHERE updated_at > %s), count(*) FROM post_index", (since,)
                ).fetchone()
                changed, indexed = (int(moved[0]), int(moved[1])) if moved else (0, 0)
                if changed > STALE_SHARE * max(indexed, 1):
                    self.clear()
                    log.info(
                        "calibrate %s: %d of %d indexed posts written since the saved work began: starting "
                        "again",
                        self.model_set,
                        changed,
                        indexed,
                    )
                    return 0
        return kept

    def load(self) -> dict[str, list[CandidateRow]]:
        """The saved rows by ``question_key``."""
        out: dict[str, list[CandidateRow]] = {}
        for key, body in self._conn.execute(
            "SELECT question, candidates FROM calibration_work WHERE model_set = %s AND context = %s",
            (self.model_set, self.context),
        ):
            rows = _decode(body) if isinstance(body, dict) else None
            if rows is not None:
                out[str(key)] = rows
        return out

    def save(self, q: CalibrationQuestion, key: str, rows: Sequence[CandidateRow]) -> None:
        """One question's rows, committed at once (the connection is in autocommit)."""
        self._conn.execute(
            "INSERT INTO calibration_work (model_set, question, context, question_id, candidates)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (model_set, question) DO UPDATE"
            " SET context = EXCLUDED.context, question_id = EXCLUDED.question_id,"
            " candidates = EXCLUDED.candidates, saved_at = now()",
            (self.model_set, key, self.context, q.id, Jsonb(_encode(rows))),
        )

    def clear(self) -> None:
        """Delete the model set's saved work (its run recorded its outcome)."""
        self._conn.execute("DELETE FROM calibration_work WHERE model_set = %s", (self.model_set,))
