"""The named seams: code above ``worker`` that ``worker`` runs without importing it.

``worker`` imports nothing from ``backfill`` or ``eval`` (tests/packaging/test_import_direction.py). The
few things it starts from them are named here, resolved by name only when they run, and each name is
checked to resolve by ``tests/packaging/test_import_direction.py``:

- the development doubles behind ``citebot forum serve`` and ``citebot models serve``;
- the index stack (``worker.protocols.Indexer``) that the composition root (``worker.assemble``) builds
  into a worker's runtime, the bulk backfill behind ``citebot backfill``, and the run behind
  ``citebot calibrate`` (it reads the forum through the backfill's sources).
"""

from __future__ import annotations

import importlib
from typing import Any

FORUM_DOUBLE = "eval.stack.forum.serve:serve"
MODEL_DOUBLE = "eval.stack.modelserver.serve:serve"
INDEXER = "backfill.indexer:BackfillIndexer"
BACKFILL = "backfill.command:run"
CALIBRATE = "backfill.calibrate:run"
SEAMS = (FORUM_DOUBLE, MODEL_DOUBLE, INDEXER, BACKFILL, CALIBRATE)


def resolve(ref: str) -> Any:
    """``"package.module:attribute"`` → that attribute, importing the module now."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)
