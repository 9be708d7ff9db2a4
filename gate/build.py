"""Rebuild what the gate derives from its rules: ``python -m gate.build`` (``make gate``).

Writes ``gate/derived.json`` (:mod:`gate.derived`): the readings of every pattern of the shipped
rules, so a fresh process loads them without parsing and compiling them all again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gate import derived

GATE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gate.build", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="read every pattern again (default: only those not yet in the file)",
    )
    args = parser.parse_args(argv)
    text = derived.render(derived.build(fresh=args.fresh))
    target = GATE / derived.FILE
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target.relative_to(GATE.parent)} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
