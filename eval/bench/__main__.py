"""Dispatch ``python -m eval.bench NAME [ARGS...]`` to ``eval.bench.NAME.main(ARGS)``."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import eval.bench as bench_pkg


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(bench_pkg.__path__) if not m.name.startswith("_"))


def main(argv: list[str]) -> int:
    names = [n for n in available() if n != "report"]
    if not argv or argv[0] in {"-h", "--help"}:
        print("usage: python -m eval.bench NAME [ARGS...]\n\nbenchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name = argv[0]
    if name not in names:
        print(f"unknown benchmark {name!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"eval.bench.{name}")
    result: int = module.main(argv[1:])
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
