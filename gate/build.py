"""Rebuild what the gate derives from its rules: ``python -m gate.build`` (``make gate``).

Writes ``gate/derived.json`` (:mod:`gate.derived`): the readings of every pattern of the shipped
rules, so a fresh process loads them without parsing and compiling them all again.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gate import derived

GATE = Path(__file__).resolve().parent


def main() -> int:
    text = derived.render(derived.build())
    target = GATE / derived.FILE
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target.relative_to(GATE.parent)} ({len(text):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
