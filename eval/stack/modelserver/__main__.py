"""``python -m eval.stack.modelserver serve ...``: the same command as ``citebot models serve``."""

from __future__ import annotations

import sys

from worker.cli import main

if __name__ == "__main__":
    sys.exit(main(["models", *sys.argv[1:]]))
