"""The demo's post index at the start of a run: what it reuses, what it removes, what the forum must serve.

The demo keeps its database between runs (`.cache/demo-pg`), so that a second run does not embed the
sample again; but its forum restarts from the exports on every run. So, before anything starts:

- rows owned by an export folder that is still on disk (``file:<path>``: the sample, or a bigger export
  someone backfilled by hand) are reused, and every such export is loaded into the forum, so that each
  indexed post has a page to link to;
- every other row is removed: the live forum's (``forum``: the members' posts an earlier run indexed
  from its webhooks, on a forum that no longer exists) and those of exports that are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from backfill.sources import LIVE_FORUM


@dataclass(frozen=True, slots=True)
class IndexStart:
    """Rows per owner that a run reuses and removes, and the exports besides the sample to serve."""

    reused: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    exports: tuple[Path, ...] = ()

    def lines(self, name: Callable[[Path], str]) -> list[str]:
        """What the demo says about it, one line each (``name`` shortens a path)."""
        if not self.reused and not self.removed:
            return ["index: empty, the sample is embedded from scratch"]
        out = []
        for owner, n in sorted(self.reused.items()):
            out.append(f"index: reusing {n} posts of {name(Path(owner.removeprefix('file:')))}")
        for owner, n in sorted(self.removed.items()):
            what = (
                "an earlier run's forum (members' posts its webhooks indexed)"
                if owner == LIVE_FORUM
                else f"{owner.removeprefix('file:')} (no longer on disk)"
            )
            out.append(f"index: removed {n} posts of {what}")
        out.extend(f"forum: also serves {name(p)}, whose posts the index holds" for p in self.exports)
        return out


def start_index(db_url: str, sample: Path) -> IndexStart:
    """Remove the rows no export on disk owns; report what is reused and which exports to serve."""
    sample = sample.resolve()
    with psycopg.connect(db_url, autocommit=True) as conn:
        counts = conn.execute("SELECT source, count(*) FROM post_index GROUP BY source").fetchall()
        reused: dict[str, int] = {}
        removed: dict[str, int] = {}
        exports: list[Path] = []
        for owner, n in counts:
            folder = Path(owner.removeprefix("file:")) if owner.startswith("file:") else None
            if folder is not None and (folder / "topics").is_dir():
                reused[owner] = int(n)
                if folder.resolve() != sample:
                    exports.append(folder)
            else:
                removed[owner] = int(n)
        if removed:
            with conn.transaction():
                conn.execute("DELETE FROM post_index WHERE source = ANY(%s)", (list(removed),))
                conn.execute("DELETE FROM backfill_state WHERE source = ANY(%s)", (list(removed),))
    return IndexStart(reused, removed, tuple(sorted(exports)))
