"""Build the forum sample shipped in ``eval/data/urho3d-sample`` from the full Urho3D archive.

``python -m eval.demo.sample --archive ../shared/data/urho3d --out eval/data/urho3d-sample``

The sample is small on purpose (a few hundred topics, a few MB): the demo's backfill embeds every post
on the CPU. It keeps the topics the demo asks about, topics near them (the competition a real index
would have), small topics with an accepted answer from the development questions, and small topics
drawn at random with a fixed seed. Topic files are written in the archive's export format (what
Discourse returns for ``GET /t/{id}.json``), one JSON document per file, without extra whitespace.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

# The topics the demo's answerable question is drawn from: "API to import a FBX or OBJ model?" and a
# second known-answered how-to (delayed method calls).
DEMO_TOPICS = (4413, 611)
# Words whose topics compete with the demo's answer (a sample of only the answer would be too easy).
NEAR_WORDS = ("fbx", "obj", "assetimporter", "blender", "import", "delay")
SEED = 20221122


def build_sample(
    archive: Path,
    out: Path,
    *,
    topics: int = 300,
    max_topic_bytes: int = 14_000,
    near: int = 40,
    from_questions: int = 140,
) -> list[int]:
    """Write ``out/topics/<id>.json`` for the chosen topics; return their ids (sorted)."""
    files = {int(p.stem): p for p in (archive / "topics").glob("*.json")}
    sizes = {tid: p.stat().st_size for tid, p in files.items()}
    small = sorted(tid for tid, size in sizes.items() if size <= max_topic_bytes)
    chosen: list[int] = [t for t in DEMO_TOPICS if t in files]
    rng = random.Random(SEED)

    near_ids = [tid for tid in small if _title_has(files[tid], NEAR_WORDS)]
    rng.shuffle(near_ids)
    _extend(chosen, near_ids, near)

    gold: list[int] = []
    questions = archive / "eval" / "questions-dev.jsonl"
    if questions.exists():
        for line in questions.read_text("utf-8").splitlines():
            if line.strip():
                gold.extend(int(t) for t in json.loads(line)["gold_topic_ids"])
    gold = [t for t in dict.fromkeys(gold) if t in sizes and sizes[t] <= max_topic_bytes]
    rng.shuffle(gold)
    _extend(chosen, gold, from_questions)

    rest = list(small)
    rng.shuffle(rest)
    _extend(chosen, rest, topics - len(chosen))

    target = out / "topics"
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.json"):
        old.unlink()
    for tid in chosen:
        data = json.loads(files[tid].read_text("utf-8"))
        (target / f"{tid}.json").write_text(
            json.dumps(data, ensure_ascii=False, separators=(",", ":")), "utf-8"
        )
    return sorted(chosen)


def _title_has(path: Path, words: Sequence[str]) -> bool:
    title = str(json.loads(path.read_text("utf-8")).get("title", "")).lower()
    return any(w in title.split() or w in title for w in words)


def _extend(chosen: list[int], candidates: Sequence[int], count: int) -> None:
    have = set(chosen)
    added = 0
    for tid in candidates:
        if added >= count:
            break
        if tid not in have:
            chosen.append(tid)
            have.add(tid)
            added += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.demo.sample", description=__doc__)
    parser.add_argument("--archive", type=Path, required=True, help="the full export (topics/*.json)")
    parser.add_argument("--out", type=Path, default=Path("eval/data/urho3d-sample"))
    parser.add_argument("--topics", type=int, default=300)
    args = parser.parse_args(argv)
    ids = build_sample(args.archive, args.out, topics=args.topics)
    posts = sum(
        len(json.loads((args.out / "topics" / f"{t}.json").read_text("utf-8"))["post_stream"]["posts"])
        for t in ids
    )
    size = sum(p.stat().st_size for p in (args.out / "topics").glob("*.json"))
    print(f"{len(ids)} topics, {posts} posts, {size / 1e6:.2f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
