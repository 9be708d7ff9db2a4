"""Dispatch ``python -m eval.bench NAME [ARGS...]`` to ``eval.bench.NAME.main(ARGS)``."""

from __future__ import annotations

import sys
from types import ModuleType

from eval.bench import (
    answer_cost,
    api_budget,
    backfill,
    excerpts,
    gate,
    gate_compare,
    gate_decisions,
    gate_intent,
    gate_lexical,
    gate_load,
    gate_sets,
    generation,
    incremental,
    lexical,
    lexical_compare,
    pipeline,
    recall,
    webhook,
    webhook_costs,
)

# Every benchmark (a module of eval/bench/ with a ``main``), by its name on the command line;
# tests/eval/test_bench_main.py checks that none is missing.
BENCHES: dict[str, ModuleType] = {
    module.__name__.rpartition(".")[2]: module
    for module in (
        answer_cost,
        api_budget,
        backfill,
        excerpts,
        gate,
        gate_compare,
        gate_decisions,
        gate_intent,
        gate_lexical,
        gate_load,
        gate_sets,
        generation,
        incremental,
        lexical,
        lexical_compare,
        pipeline,
        recall,
        webhook,
        webhook_costs,
    )
}


def available() -> list[str]:
    return sorted(BENCHES)


def main(argv: list[str]) -> int:
    names = available()
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: python -m eval.bench NAME [ARGS...]\n\nbenchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name = argv[0]
    if name not in BENCHES:
        print(f"unknown benchmark {name!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    result: int = BENCHES[name].main(argv[1:])
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
