"""Shared output of every benchmark: a readable table and one JSON line, saved under eval/results/bench/."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results" / "bench"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows as an aligned plain-text table."""
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def emit(name: str, figures: Mapping[str, object]) -> Path:
    """Print the final JSON line of a benchmark and save it as eval/results/bench/NAME.json."""
    payload = {"bench": name, **figures}
    line = json.dumps(payload, sort_keys=False, default=_default)
    print(line)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(line + "\n", encoding="utf-8")
    return path


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def _default(value: object) -> object:
    if hasattr(value, "item"):
        return value.item()
    return str(value)
