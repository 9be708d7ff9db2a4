"""``python -m eval.bench gate_compare --baseline TREE``: this tree's gate against another tree's.

For a change that must keep every decision (a speed-up), two checks in one process:

- **decisions**: both gates (``Gate.check``, rules and lexical head, and the rules alone) over every
  labelled line (``eval/data/gate/**/*.jsonl``, every role, the dev probes), the 1,000 forum
  questions and every archive post; every difference in ``(hit, rule_id, category)`` is counted and
  the first ones printed;
- **time**: the rules alone (normalisation included; ``--layer rules+head``: ``Gate.check`` with
  the lexical head, as the pipeline calls it) of both gates over the forum questions, alternated
  ``--rounds`` times (baseline, this tree, baseline, ...), each question timed ``--repeat`` times
  and its best run kept (wall clock and thread CPU time), with the ratios; ``--interleave``
  alternates the two trees on every run of every question instead (baseline, this tree, baseline,
  ...), so a burst of load on a shared machine falls on both alike: the steadier ratio where other
  jobs run.

``TREE`` is a directory holding a ``gate/`` package (e.g. ``git archive <commit> gate | tar -x -C
TREE``); its rules file, lexicons and lexical head are its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.bench.gate import FORUM, PROBES, forum_questions, percentile, time_each
from eval.bench.report import emit, print_table
from gate import Gate
from gate.train.lexical import archive_texts

REPO = Path(__file__).resolve().parents[2]
LABELLED = [*sorted((REPO / "eval" / "data" / "gate").rglob("*.jsonl")), PROBES]


def tree_gates(tree: Path) -> tuple[Any, Any]:
    """``(Gate.check gate, rules-only gate)`` built from the ``gate`` package of ``tree``, loaded beside
    this tree's under the same name (``sys.modules`` swapped for the import and the loading)."""
    ours = {name: mod for name, mod in sys.modules.items() if name == "gate" or name.startswith("gate.")}
    for name in ours:
        del sys.modules[name]
    sys.path.insert(0, str(tree))
    theirs: dict[str, Any] = {}
    try:
        import gate as package  # the other tree's: ours left sys.modules above

        if Path(package.__file__ or "").resolve().parent != (tree / "gate").resolve():
            raise SystemExit(f"gate_compare: {tree}/gate was not the package imported")
        whole = package.Gate.load()
        rules_only = package.Gate.load(lexical=False)
    finally:
        sys.path.remove(str(tree))
        theirs = {n: m for n, m in sys.modules.items() if n == "gate" or n.startswith("gate.")}
        for name in theirs:
            del sys.modules[name]
        sys.modules.update(ours)
    return whole, rules_only


def labelled_texts() -> list[str]:
    texts = []
    for path in LABELLED:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["text"])
    return texts


def _key(decision: Any) -> tuple[bool, str | None, str | None]:
    return (decision.hit, decision.rule_id, decision.category)


def differences(
    ours: Callable[[str], Any], theirs: Callable[[str], Any], texts: Sequence[str]
) -> list[tuple[int, Any, Any]]:
    out = []
    for i, text in enumerate(texts):
        a, b = _key(theirs(text)), _key(ours(text))
        if a != b:
            out.append((i, a, b))
    return out


def interleaved(
    checks: Sequence[Callable[[str], Any]], texts: Sequence[str], repeat: int
) -> list[tuple[list[float], list[float]]]:
    """Per check, its (wall clock, thread CPU) ms on each text, each the best of ``repeat`` runs
    (a wall-clock run and a CPU run apart, as ``time_each``), the checks alternated run by run."""
    wall: list[list[float]] = [[] for _ in checks]
    cpu: list[list[float]] = [[] for _ in checks]
    for text in texts:
        best_wall = [float("inf")] * len(checks)
        best_cpu = [float("inf")] * len(checks)
        for _ in range(repeat):
            for i, check in enumerate(checks):
                start = time.perf_counter()
                check(text)
                best_wall[i] = min(best_wall[i], time.perf_counter() - start)
                start = time.thread_time()
                check(text)
                best_cpu[i] = min(best_cpu[i], time.thread_time() - start)
        for i in range(len(checks)):
            wall[i].append(best_wall[i] * 1000)
            cpu[i].append(best_cpu[i] * 1000)
    return list(zip(wall, cpu, strict=True))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench gate_compare", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--baseline", type=Path, required=True, help="a directory holding a gate/ package")
    parser.add_argument("--limit", type=int, default=1000, help="forum questions (default 1000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per question (best kept)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two trees")
    parser.add_argument("--no-decisions", action="store_true", help="time only")
    parser.add_argument(
        "--interleave", action="store_true", help="alternate the trees on every run of every question"
    )
    parser.add_argument("--no-archive", action="store_true", help="decisions without the archive posts")
    parser.add_argument(
        "--layer", choices=("rules", "rules+head"), default="rules", help="what is timed (default: rules)"
    )
    args = parser.parse_args(list(argv))

    base_whole, base_rules = tree_gates(args.baseline)
    ours_whole, ours_rules = Gate.load(), Gate.load(lexical=False)
    forum = forum_questions(FORUM, args.limit)
    figures: dict[str, Any] = {"baseline": str(args.baseline)}
    if not args.no_decisions:
        sets: dict[str, Sequence[str]] = {"labelled": labelled_texts(), "forum": forum}
        if not args.no_archive:
            sets["archive"] = archive_texts()[1]
        rows = []
        for name, texts in sets.items():
            for layer, ours, theirs in (
                ("rules+head", ours_whole.check, base_whole.check),
                ("rules", ours_rules.check, base_rules.check),
            ):
                diff = differences(ours, theirs, texts)
                rows.append([name, layer, len(texts), len(diff)])
                figures[f"{name}.{layer}.differences"] = len(diff)
                for i, before, after in diff[:5]:
                    print(f"  {name} #{i} {layer}: {before} -> {after}: {texts[i][:120]!r}")
        print_table(["set", "layer", "n", "different decisions"], rows)
    keys = ("median_ms", "p99_ms", "cpu_median_ms", "cpu_p99_ms")
    timed = (base_whole, ours_whole) if args.layer == "rules+head" else (base_rules, ours_rules)
    timing: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        if args.interleave:
            measured = interleaved([gate.check for gate in timed], forum, args.repeat)
        else:
            measured = [
                (
                    time_each(gate.check, forum, args.repeat),
                    time_each(gate.check, forum, args.repeat, clock=time.thread_time),
                )
                for gate in timed
            ]
        for tree, (wall, cpu) in zip(("baseline", "this tree"), measured, strict=True):
            values = (
                statistics.median(wall),
                percentile(wall, 0.99),
                statistics.median(cpu),
                percentile(cpu, 0.99),
            )
            timing.append({"round": round_ + 1, "tree": tree, **dict(zip(keys, values, strict=True))})
    print_table(
        ["round", "tree", "median ms", "p99 ms", "cpu median ms", "cpu p99 ms"],
        [[t["round"], t["tree"], *(t[k] for k in keys)] for t in timing],
    )
    base = [t for t in timing if t["tree"] == "baseline"]
    ours_t = [t for t in timing if t["tree"] == "this tree"]
    ratios = {
        key: statistics.median(o[key] / b[key] for o, b in zip(ours_t, base, strict=True)) for key in keys
    }
    print(
        "this tree / baseline (median of the rounds): "
        + ", ".join(f"{k} x{v:.3f}" for k, v in ratios.items())
    )
    figures["layer"] = args.layer
    figures["interleaved"] = args.interleave
    figures["repeat"] = args.repeat
    figures["questions"] = len(forum)
    figures["rounds"] = timing
    figures["ratios"] = ratios
    emit("gate_compare", figures)
    return 0
