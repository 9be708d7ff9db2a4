"""``python -m eval.demo``: see ``eval.demo.run``."""

from eval.demo.run import main

raise SystemExit(main())
