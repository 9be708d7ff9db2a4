"""Every labelled line and forum question through the shipped gate, one decision per line: a snapshot
to compare before and after a change that must not change any decision.

    python -m eval.bench.gate_decisions --out /tmp/before.jsonl      # on the old code
    python -m eval.bench.gate_decisions --out /tmp/after.jsonl       # on the new code
    python -m eval.bench.gate_decisions --compare /tmp/before.jsonl  # or diff the two files

The lines: every ``*.jsonl`` under ``eval/data/gate/`` (their ``text``; every role), the probe file
beside the clone, the first posts of the Urho3D archive (dev questions first, as
``eval.bench.gate.forum_questions``; ``--limit``, default all of them) and, with ``--archive``, every
post of the archive (``gate.train.lexical.archive_texts``). A decision is its hit, rule, category,
kind, language and reading, under a regex timeout no pattern reaches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from eval.bench.gate import FORUM, PROBES, REPO, forum_questions
from gate import Gate, GateDecision

TIMEOUT_MS = 600_000


def labelled_lines(repo: Path = REPO, probes: Path = PROBES) -> Iterator[tuple[str, str]]:
    """(where, text) of every labelled line: ``path:line``."""
    folders = [repo / "eval" / "data" / "gate"]
    paths = [p for folder in folders for p in sorted(folder.rglob("*.jsonl"))]
    if probes.exists():
        paths.append(probes)
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                row = json.loads(line)
                if isinstance(row.get("text"), str):
                    name = path.relative_to(repo.parent) if path.is_relative_to(repo.parent) else path
                    yield f"{name}:{number}", row["text"]


def decision_row(where: str, decision: GateDecision) -> dict[str, object]:
    return {
        "where": where,
        "hit": decision.hit,
        "rule": decision.rule_id,
        "category": decision.category,
        "kind": decision.kind,
        "language": decision.language,
        "reading": decision.reading,
    }


def snapshot(gate: Gate, limit: int | None, archive: bool = False) -> Iterator[dict[str, object]]:
    for where, text in labelled_lines():
        yield decision_row(where, gate.check(text))
    if FORUM.exists():
        for i, text in enumerate(forum_questions(FORUM, limit if limit is not None else 10**9)):
            yield decision_row(f"forum:{i}", gate.check(text))
        if archive:
            from gate.train.lexical import archive_texts

            for ident, text in zip(*archive_texts(), strict=True):
                yield decision_row(f"archive:{ident}", gate.check(text))


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench.gate_decisions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, help="write the snapshot here (JSON Lines)")
    parser.add_argument("--compare", type=Path, help="compare with this snapshot; exit 1 on any difference")
    parser.add_argument("--limit", type=int, default=None, help="forum questions (default: all)")
    parser.add_argument("--archive", action="store_true", help="every archive post too")
    args = parser.parse_args(list(argv))
    start = time.perf_counter()
    gate = Gate.load(timeout_ms=TIMEOUT_MS)
    loaded = time.perf_counter() - start
    rows = list(snapshot(gate, args.limit, args.archive))
    print(
        f"load {loaded:.2f} s, {len(rows)} lines, {sum(bool(r['hit']) for r in rows)} hits", file=sys.stderr
    )
    if args.out:
        args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    if args.compare:
        old = [json.loads(line) for line in args.compare.read_text(encoding="utf-8").splitlines()]
        differ = [(a, b) for a, b in zip(old, rows, strict=False) if a != b]
        if len(old) != len(rows):
            print(f"{len(old)} lines before, {len(rows)} now", file=sys.stderr)
        for a, b in differ[:50]:
            print(f"DIFF {a} -> {b}", file=sys.stderr)
        print(f"{len(differ)} decisions differ", file=sys.stderr)
        return 1 if differ or len(old) != len(rows) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
