"""``stage_calibrations``: what ``citebot calibrate`` fitted, and what the worker reads from it.

One row per run (migration 0015); at most one ``active`` row per model set. ``Calibrations`` is the
worker's reader: the active row of a model set, read again at most every ``ttl_s`` seconds, so a
calibration is used from the next question after that (the worker's default: 60 s, the index check's
``CITEBOT_RETRIEVAL__INDEX_CHECK_TTL_S``). A failed read keeps what was read before (or, the first
time, nothing: the shipped weights), logged once per failure; an answer never fails for it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from worker.metrics import CALIBRATION_MERIT
from worker.retrieval.aggregate import Thresholds
from worker.retrieval.recall import ConnectionSource
from worker.retrieval.stage import CE_PREFIX, StageModel, model_from_dict

log = logging.getLogger(__name__)

ACTIVATED = "activated"  # fitted and in use
FORCED = "forced"  # in use although the active one did better on the test half (--force)
KEPT_ACTIVE = "kept_active"  # fitted, not used: what is in use did better on the test half
TOO_LITTLE_DATA = "too_little_data"  # not fitted: fewer solved topics than the minimum
INTERRUPTED = "interrupted"  # stopped while the questions were asked; the same command continues it

_COLUMNS = (
    "id, model_set, fitted_at, active, decision, model, abstain_below, weak_below, source, questions, figures"
)


_INSERT = f"""
INSERT INTO stage_calibrations (model_set, active, decision, model, abstain_below, weak_below, source,
    questions, figures) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}
"""  # noqa: S608


@dataclass(frozen=True, slots=True)
class Calibration:
    """One run of ``citebot calibrate`` as recorded."""

    id: int
    model_set: str
    fitted_at: dt.datetime
    active: bool
    decision: str
    model: StageModel | None
    abstain_below: float | None
    weak_below: float | None
    source: str
    questions: Mapping[str, Any] = field(default_factory=dict)
    figures: Mapping[str, Any] = field(default_factory=dict)

    @property
    def thresholds(self) -> Thresholds | None:
        if self.abstain_below is None or self.weak_below is None:
            return None
        return Thresholds(
            self.abstain_below,
            self.weak_below,
            source=f"citebot calibrate, {self.fitted_at:%Y-%m-%d %H:%M} UTC (stage_calibrations {self.id})",
        )


def _row(r: tuple[Any, ...]) -> Calibration:
    model_set = str(r[1])
    return Calibration(
        id=int(r[0]),
        model_set=model_set,
        fitted_at=r[2],
        active=bool(r[3]),
        decision=str(r[4]),
        model=model_from_dict(model_set, r[5]) if r[5] else None,
        abstain_below=None if r[6] is None else float(r[6]),
        weak_below=None if r[7] is None else float(r[7]),
        source=str(r[8]),
        questions=r[9] or {},
        figures=r[10] or {},
    )


def _json(value: Any) -> Jsonb:
    """``value`` as jsonb; a non-finite number (JSON has none) is refused here, not by PostgreSQL."""
    json.dumps(value, allow_nan=False)
    return Jsonb(value)


def active(conn: psycopg.Connection, model_set: str) -> Calibration | None:
    """The calibration in use for ``model_set``, if any."""
    r = conn.execute(
        f"SELECT {_COLUMNS} FROM stage_calibrations WHERE model_set = %s AND active",  # noqa: S608
        (model_set,),
    ).fetchone()
    return _row(r) if r else None


def latest_check(conn: psycopg.Connection, model_set: str) -> Mapping[str, Any] | None:
    """The newest run's measure of the weights in use then (``figures.active_check``), if any."""
    r = conn.execute(
        "SELECT figures -> 'active_check' FROM stage_calibrations"
        " WHERE model_set = %s AND figures ? 'active_check' ORDER BY id DESC LIMIT 1",
        (model_set,),
    ).fetchone()
    return r[0] if r and isinstance(r[0], dict) else None


def history(
    conn: psycopg.Connection, model_set: str | None = None, limit: int = 10, *, finished: bool = False
) -> list[Calibration]:
    """The latest runs, newest first (of ``model_set``, or all; ``finished``: not the interrupted)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM stage_calibrations WHERE (%(m)s::text IS NULL OR model_set = %(m)s) "  # noqa: S608
        "AND NOT (%(f)s AND decision = %(i)s) ORDER BY id DESC LIMIT %(n)s",
        {"m": model_set, "n": limit, "f": finished, "i": INTERRUPTED},
    ).fetchall()
    return [_row(r) for r in rows]


def cross_encoder_sets(conn: psycopg.Connection, model_sets: Sequence[str]) -> list[str]:
    """The recorded model sets that are one of ``model_sets`` with a cross-encoder (``…+ce:<id>``)."""
    rows = conn.execute(
        "SELECT DISTINCT model_set FROM stage_calibrations WHERE strpos(model_set, %s) > 0 ORDER BY 1",
        (CE_PREFIX,),
    ).fetchall()
    found = [str(r[0]) for r in rows]
    return [m for m in found if any(m.startswith(base + CE_PREFIX) for base in model_sets)]


def record(
    conn: psycopg.Connection,
    *,
    model_set: str,
    decision: str,
    source: str,
    questions: Mapping[str, Any],
    figures: Mapping[str, Any],
    model: StageModel | None = None,
    abstain_below: float | None = None,
    weak_below: float | None = None,
) -> Calibration:
    """Record a run; an ``activated`` or ``forced`` one becomes the model set's active row (the previous
    one stays as history), in one transaction."""
    make_active = decision in (ACTIVATED, FORCED)
    if make_active and (model is None or abstain_below is None or weak_below is None):
        raise ValueError("an active calibration needs its model and thresholds")
    for v in (abstain_below, weak_below):
        if v is not None and not math.isfinite(v):
            raise ValueError("thresholds must be finite")
    with conn.transaction():
        if make_active:
            conn.execute(
                "UPDATE stage_calibrations SET active = false WHERE model_set = %s AND active", (model_set,)
            )
        r = conn.execute(
            _INSERT,
            (
                model_set,
                make_active,
                decision,
                _json(model.as_dict()) if model is not None else None,
                abstain_below,
                weak_below,
                source,
                _json(dict(questions)),
                _json(dict(figures)),
            ),
        ).fetchone()
    if r is None:  # pragma: no cover - INSERT … RETURNING returns its row
        raise RuntimeError("stage_calibrations: the insert returned nothing")
    return _row(r)


class Calibrations:
    """The active calibration of each model set, for the worker (module docstring)."""

    def __init__(
        self, connections: ConnectionSource, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._connections = connections
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, Calibration | None]] = {}

    def get(self, model_set: str) -> Calibration | None:
        with self._lock:
            now = self._clock()
            held = self._cached.get(model_set)
            if held is not None and now - held[0] < self._ttl_s:
                return held[1]
            try:
                with self._connections() as conn, conn.transaction():
                    found = active(conn, model_set)
                    check = latest_check(conn, model_set) if found is not None else None
                _export_merit(model_set, found, check)
            except psycopg.Error as exc:
                found = held[1] if held is not None else None
                log.warning(
                    "stage calibrations unreadable (%s): %s",
                    type(exc).__name__,
                    "keeping the last read" if held is not None else "using the shipped weights",
                )
            if held is not None and (held[1] and held[1].id) != (found and found.id):
                log.info("model set %s: now %s", model_set, describe(found))
            self._cached[model_set] = (now, found)
            return found


def _export_merit(model_set: str, found: Calibration | None, check: Mapping[str, Any] | None) -> None:
    """The gauge ``citebot_calibration_merit`` for the weights in use: their merit when fitted and as the
    latest run that measured them found it (the alert CitebotCalibrationDropped compares the two)."""
    if found is None:
        return
    at_fit = ((found.figures.get("test_half") or {}).get("calibrated") or {}).get("merit")
    if at_fit is None:
        return
    latest = at_fit
    if check is not None and check.get("calibration") == found.id and check.get("now") is not None:
        latest = check["now"]
    CALIBRATION_MERIT.labels(model_set, "at_fit").set(float(at_fit))
    CALIBRATION_MERIT.labels(model_set, "latest").set(float(latest))


def describe(calibration: Calibration | None) -> str:
    if calibration is None:
        return "the shipped weights (no calibration in use)"
    return (
        f"weights from citebot calibrate (stage_calibrations {calibration.id}, "
        f"{calibration.fitted_at:%Y-%m-%d %H:%M} UTC, {calibration.decision})"
    )


def figures_table(test_half: dict[str, Any]) -> list[str]:
    """The test half's figures, one line per weights judged (95 % Wilson intervals in brackets)."""

    def cell(f: dict[str, Any] | None) -> str:
        if not f or f.get("value") is None:
            return "—"
        lo, hi = f["ci95"]
        return f"{f['value']:.3f} [{lo:.2f}, {hi:.2f}] n={f['n']}"

    lines = [
        "  test half: weights | topic@5 | post@5 | out-of-domain abstained | answerable abstained | merit"
    ]
    for name, f in test_half.items():
        lines.append(
            f"    {name}: {cell(f['all']['topic@5'])} | {cell(f['all']['post@5'])} | "
            f"{cell(f['ood']['abstained'])} | {cell(f['all']['abstained'])} | {f['merit']:.4f}"
        )
    return lines
