"""The retrieval trace: what each stage did, how long it took, and which fallbacks were taken.

Stages may run in parallel threads (the keyword branch runs beside embed + recall), so each record
carries its start offset from the beginning of the trace as well as its duration: the overlap of two
branches is visible in the trace itself. ``to_dict()`` is plain JSON data, stored with the answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(slots=True)
class Stage:
    """One stage's record; filled in by the stage while it runs, then frozen into ``Trace.to_dict``."""

    name: str
    start_ms: float
    duration_ms: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    top_scores: list[float] = field(default_factory=list)
    fallback: str | None = None
    error: str | None = None
    info: dict[str, object] = field(default_factory=dict)

    def scores(self, values: Sequence[float | None], n: int = 5) -> None:
        """Record the first ``n`` non-missing scores, rounded for readability."""
        self.top_scores = [round(float(v), 4) for v in values if v is not None][:n]

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "start_ms": round(self.start_ms, 3),
            "duration_ms": round(self.duration_ms, 3),
            "counts": dict(self.counts),
            "top_scores": list(self.top_scores),
        }
        if self.fallback is not None:
            out["fallback"] = self.fallback
        if self.error is not None:
            out["error"] = self.error
        if self.info:
            out["info"] = dict(self.info)
        return out


class Trace:
    """An append-only, thread-safe list of stage records and fallbacks for one question."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self._stages: list[Stage] = []
        self._fallbacks: list[dict[str, str]] = []
        self.info: dict[str, object] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[Stage]:
        """Time the block as stage ``name``; the record is kept even when the block raises."""
        record = Stage(name=name, start_ms=(self._clock() - self._t0) * 1000)
        try:
            yield record
        except BaseException as exc:
            record.error = type(exc).__name__
            raise
        finally:
            record.duration_ms = (self._clock() - self._t0) * 1000 - record.start_ms
            with self._lock:
                self._stages.append(record)

    def fallback(self, stage: str, reason: str) -> None:
        """Record that ``stage`` fell back (legacy retrieval, fused order, no keyword channel...)."""
        with self._lock:
            self._fallbacks.append({"stage": stage, "reason": reason})

    @property
    def stages(self) -> list[Stage]:
        with self._lock:
            return sorted(self._stages, key=lambda s: s.start_ms)

    @property
    def fallbacks(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._fallbacks)

    def get(self, name: str) -> Stage | None:
        """The first record of stage ``name``, if it ran."""
        return next((s for s in self.stages if s.name == name), None)

    def total_ms(self) -> float:
        return (self._clock() - self._t0) * 1000

    def to_dict(self) -> dict[str, object]:
        stages = self.stages
        end = max((s.start_ms + s.duration_ms for s in stages), default=0.0)
        return {
            "total_ms": round(end, 3),
            "stages": [s.as_dict() for s in stages],
            "fallbacks": self.fallbacks,
            **({"info": dict(self.info)} if self.info else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=False)
