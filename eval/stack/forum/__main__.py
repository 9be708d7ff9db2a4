"""``python -m eval.stack.forum serve ...``: the same command as ``citebot forum serve``."""

from __future__ import annotations

import sys

from worker.cli import main

if __name__ == "__main__":
    sys.exit(main(["forum", *sys.argv[1:]]))
