"""``python -m eval.soak``."""

from eval.soak.run import main

raise SystemExit(main())
