"""What a fresh process pays for the gate: ``Gate.load()`` (CPU and wall), the first pass over the
forum questions (each question's first check, which compiles the patterns it needs), then rules +
head per question once warm (best of ``--repeat``, median and p99). One JSON line on stdout.

    python eval/bench/gate_load.py                 # the gate on the import path
    python eval/bench/gate_load.py --alternate OLD  # OLD: a folder holding another gate/ package;
                                                    # runs both, alternated, --rounds times each

Also ``python -m eval.bench gate_load``; each measure runs in a fresh process started on this file,
so that ``--alternate`` can put another ``gate`` package first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def measure(limit: int, repeat: int) -> dict[str, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    from gate import Gate

    import_cpu = time.process_time() - cpu
    cpu, wall = time.process_time(), time.perf_counter()
    gate = Gate.load()
    load_cpu, load_wall = time.process_time() - cpu, time.perf_counter() - wall
    from eval.bench.gate import forum_questions, percentile, time_each

    texts = forum_questions(limit=limit)
    first = time_each(gate.check, texts, 1)
    warm = time_each(gate.check, texts, repeat)
    return {
        "gate": str(Path(sys.modules["gate"].__file__ or "").parent),
        "import_cpu_s": round(import_cpu, 3),
        "load_cpu_s": round(load_cpu, 3),
        "load_wall_s": round(load_wall, 3),
        "first_pass_total_s": round(sum(first) / 1000, 3),
        "first_pass_p99_ms": round(percentile(first, 0.99), 3),
        "median_ms": round(statistics.median(warm), 4),
        "p99_ms": round(percentile(warm, 0.99), 4),
        "n": len(texts),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--alternate", type=Path, help="folder holding the other gate/ package")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.alternate is None:
        # this script's folder holds eval/bench/gate.py: never let it stand for the gate package
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
        if str(REPO) not in sys.path:
            sys.path.append(str(REPO))
        print(json.dumps(measure(args.limit, args.repeat)))
        return 0
    trees = {"other": [str(args.alternate.resolve()), str(REPO)], "this": [str(REPO)]}
    results: dict[str, list[dict[str, object]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, path in trees.items():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
            command = [sys.executable, __file__, "--limit", str(args.limit), "--repeat", str(args.repeat)]
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd="/")
            row = json.loads(out.stdout)
            results[name].append(row)
            print(name, json.dumps(row), flush=True)
    for name, rows in results.items():
        summary = {
            k: statistics.median(float(str(r[k])) for r in rows) for k in rows[0] if k not in ("gate", "n")
        }
        print(f"{name} (median of {len(rows)} rounds): {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
