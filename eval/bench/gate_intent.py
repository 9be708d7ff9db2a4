"""``python -m eval.bench gate_intent {train,archive,time}``: fit, calibrate and check the gate's
embedding layer (``gate/intent.py``) with the local embedder (the ``.[local]`` extra).

- ``train``: embeds ``gate/intent/exemplars.jsonl`` (as questions, like the pipeline) and sets the
  threshold: above the highest score of the 1,000 forum questions of ``python -m eval.bench gate``
  (plus ``--margin``), and high enough that at most ``--benign-rate`` of the benign look-alikes of
  the regression sets (``tests/gate/*.jsonl``) reach it. Writes ``gate/intent/<model>.json``.
- ``archive``: scores every post of the Urho3D archive (cooked HTML to text, embedded as a question)
  and lists those the layer would block: the false-block check over the whole archive. Vectors are
  cached in ``.cache/gate-intent/`` (embedding 37k posts takes a while on a CPU).
- ``time``: the layer's cost per question, apart from the embedding the pipeline computes anyway.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.bench.gate import FORUM, cooked_to_text, forum_questions, percentile
from eval.bench.report import emit
from gate.intent import BENIGN, IntentLayer, exemplars_digest, exemplars_text, model_slug

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "gate-intent"
WEIGHTS_DIR = REPO / "gate" / "intent"


def embedder() -> Any:
    from worker.clients.local_embedder import LocalEmbedder
    from worker.settings import EmbeddingsSettings

    return LocalEmbedder(EmbeddingsSettings.model_validate({}))


def embed(emb: Any, texts: Sequence[str]) -> Any:
    return np.asarray(emb.embed(list(texts), kind="query"), dtype=np.float32)


CHUNK = 1000
"""Texts embedded and saved at a time: a long run (the archive) resumes where it was stopped."""


def cached_vectors(emb: Any, name: str, texts: Sequence[str]) -> Any:
    """Vectors of ``texts``, cached under ``name`` with a digest of the texts and the model.

    Saved ``CHUNK`` texts at a time (each chunk named by its own digest), then as one file."""
    CACHE.mkdir(parents=True, exist_ok=True)
    digest = exemplars_digest(emb.model + "\n" + "\n\x00".join(texts))[:16]
    path = CACHE / f"{name}-{model_slug(emb.model)}-{digest}.npy"
    if path.exists():
        return np.load(path)
    parts = []
    chunks = [_chunk_path(emb, texts[start : start + CHUNK]) for start in range(0, len(texts), CHUNK)]
    for start, chunk_path in zip(range(0, len(texts), CHUNK), chunks, strict=True):
        chunk = texts[start : start + CHUNK]
        if chunk_path.exists():
            parts.append(np.load(chunk_path))
            continue
        parts.append(embed(emb, chunk))
        np.save(chunk_path, parts[-1])
        print(f"{name}: {min(start + CHUNK, len(texts))}/{len(texts)} embedded", flush=True)
    vectors = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
    np.save(path, vectors)
    for chunk_path in chunks:
        chunk_path.unlink(missing_ok=True)
    return vectors


def _chunk_path(emb: Any, texts: Sequence[str]) -> Path:
    digest = exemplars_digest(emb.model + "\n" + "\n\x00".join(texts))[:16]
    return CACHE / f"chunk-{model_slug(emb.model)}-{digest}.npy"


def exemplars() -> list[dict[str, str]]:
    return [json.loads(line) for line in exemplars_text().splitlines() if line.strip()]


def archive_posts(root: Path = FORUM) -> tuple[list[int], list[str]]:
    ids: list[int] = []
    texts: list[str] = []
    for path in sorted((root / "topics").glob("*.json"), key=lambda p: int(p.stem)):
        for post in json.loads(path.read_text(encoding="utf-8"))["post_stream"]["posts"]:
            text = cooked_to_text(post.get("cooked", ""))
            if text:
                ids.append(int(post["id"]))
                texts.append(text)
    return ids, texts


def regression_benign() -> list[str]:
    """The benign look-alikes of the gate's regression sets (``tests/gate/*.jsonl``): the threshold
    must keep their false blocks under ``--benign-rate`` too. Never the held-out sets."""
    texts = []
    for path in sorted((REPO / "tests" / "gate").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line)["expect"] == "pass":
                texts.append(json.loads(line)["text"])
    return texts


def train(args: argparse.Namespace) -> int:
    if args.head == "linear":
        return train_linear(args)
    emb = embedder()
    rows = exemplars()
    vectors = embed(emb, [r["text"] for r in rows])
    harmful = [i for i, r in enumerate(rows) if r["label"] != BENIGN]
    benign = [i for i, r in enumerate(rows) if r["label"] == BENIGN]
    layer = IntentLayer(
        model=emb.model,
        harmful=vectors[harmful],
        labels=[rows[i]["label"] for i in harmful],
        benign=vectors[benign],
        k=args.k,
        threshold=0.0,
    )
    forum = forum_questions(FORUM, 1000)
    forum_scores = [layer.check(v).score for v in cached_vectors(emb, "forum", forum)]
    look_alikes = regression_benign()
    look_scores = sorted(layer.check(v).score for v in cached_vectors(emb, "look-alikes", look_alikes))
    allowed = int(args.benign_rate * len(look_scores))
    # The lowest threshold with at most `allowed` look-alikes at or above it.
    look_threshold = look_scores[len(look_scores) - allowed - 1] + 1e-4
    top = max(forum_scores)
    threshold = max(top + args.margin, look_threshold, args.at_least)
    info = {
        "method": (
            f"mean similarity of the {args.k} nearest harmful exemplars minus the {args.k} nearest benign"
        ),
        "exemplars": len(rows),
        "exemplars_by_label": {
            c: sum(r["label"] == c for r in rows) for c in sorted({r["label"] for r in rows})
        },
        "calibration": (
            f"threshold = max(highest score of the 1000 forum questions {top:.4f} + {args.margin}, "
            f"the score that keeps {allowed} of the {len(look_scores)} benign look-alikes of tests/gate "
            f"at or above it: {look_threshold:.4f}, --at-least {args.at_least})"
        ),
        "forum_score_max": round(top, 4),
        "forum_score_p99": round(percentile(forum_scores, 0.99), 4),
    }
    layer = IntentLayer(
        model=emb.model,
        harmful=layer.harmful,
        labels=layer.labels,
        benign=layer.benign,
        k=args.k,
        threshold=threshold,
        exemplars_sha256=exemplars_digest(exemplars_text()),
        info=info,
    )
    out = WEIGHTS_DIR / f"{model_slug(emb.model)}.json"
    out.write_text(json.dumps(layer.to_json(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)}: {len(harmful)} harmful and {len(benign)} benign exemplars")
    print(info["calibration"])
    print(f"threshold {threshold:.4f}; forum p99 {info['forum_score_p99']}")
    return 0


def archive_sample(emb: Any) -> Any:
    """The archive posts whose vectors are already cached (whole chunks from the start of the
    archive that ``archive`` embedded before it was stopped): real forum text for the linear head."""
    _, texts = archive_posts()
    vectors = []
    for start in range(0, len(texts), CHUNK):
        path = _chunk_path(emb, texts[start : start + CHUNK])
        if not path.exists():
            break
        vectors.append(np.load(path))
    return np.concatenate(vectors) if vectors else np.zeros((0, emb.dimension), dtype=np.float32)


def train_linear(args: argparse.Namespace) -> int:
    """The linear head (``eval/bench/gate_head.py``) and its threshold."""
    from eval.bench.gate_head import (
        FORUM_TEXT,
        HARMFUL,
        LOOK_ALIKE,
        fit_logistic,
        out_of_fold_logits,
        regression_rows,
        training_set,
    )

    emb = embedder()
    rows = exemplars()
    exemplar_vectors = cached_vectors(emb, "exemplars", [r["text"] for r in rows])
    regression = regression_rows()
    regression_vectors = np.vstack(
        [
            cached_vectors(emb, path.stem, [r["text"] for r in _rows(path)])
            for path in sorted((REPO / "tests" / "gate").glob("*.jsonl"))
        ]
    )
    forum_vectors = cached_vectors(emb, "forum", forum_questions(FORUM, 1000))
    sample = archive_sample(emb)
    x, y, weight, group = training_set(
        rows, exemplar_vectors, regression, regression_vectors, np.vstack([forum_vectors, sample])
    )
    head = fit_logistic(x, y, weight, l2=args.l2)
    harmful = [i for i, r in enumerate(rows) if r["label"] != BENIGN]
    benign = [i for i, r in enumerate(rows) if r["label"] == BENIGN]
    # The look-alikes' threshold from heads fitted without them (in sample, every one of them would
    # be far below it): at most --benign-rate of them out of fold at or above it.
    out_of_fold = out_of_fold_logits(x, y, weight, l2=args.l2)
    look = np.sort(out_of_fold[group == LOOK_ALIKE])
    allowed = int(args.benign_rate * len(look))
    look_threshold = float(look[len(look) - allowed - 1]) + 1e-4
    forum_top = float((x[group == FORUM_TEXT] @ head.weights + head.bias).max())
    threshold = max(forum_top + args.margin, look_threshold)
    info = {
        "method": "logistic regression over the question embedding (eval/bench/gate_head.py); "
        f"category from the {args.k} nearest harmful exemplars",
        "training": {
            "harmful": int((group == HARMFUL).sum()),
            "look_alikes": int((group == LOOK_ALIKE).sum()),
            "forum_texts": int((group == FORUM_TEXT).sum()),
            "l2": args.l2,
        },
        "calibration": (
            f"threshold = max(highest logit of the {len(forum_vectors)} forum questions and {len(sample)} "
            f"archive posts (in sample) {forum_top:.3f} + {args.margin}, the logit that keeps "
            f"{allowed} of the {len(look)} look-alikes at or above it out of fold: {look_threshold:.3f})"
        ),
        "out_of_fold_harmful_recall": round(float((out_of_fold[group == HARMFUL] >= threshold).mean()), 4),
    }
    layer = IntentLayer(
        model=emb.model,
        harmful=exemplar_vectors[harmful],
        labels=[rows[i]["label"] for i in harmful],
        benign=exemplar_vectors[benign],
        k=args.k,
        threshold=threshold,
        exemplars_sha256=exemplars_digest(exemplars_text()),
        info=info,
        weights=head.weights,
        bias=head.bias,
    )
    out = WEIGHTS_DIR / f"{model_slug(emb.model)}.json"
    out.write_text(json.dumps(layer.to_json(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)}: {json.dumps(info, indent=1)}")
    return 0


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def archive(args: argparse.Namespace) -> int:
    layer = IntentLayer.load()
    emb = embedder()
    ids, texts = archive_posts()
    vectors = cached_vectors(emb, "archive", texts)
    forum = forum_questions(FORUM, 1000)
    forum_vectors = cached_vectors(emb, "forum", forum)
    blocks = []
    for name, ident, vecs in (("forum", list(range(len(forum))), forum_vectors), ("archive", ids, vectors)):
        scores = [layer.check(v) for v in vecs]
        hits = [(i, d) for i, d in zip(ident, scores, strict=True) if d.hit]
        print(
            f"{name}: {len(vecs)} texts, {len(hits)} blocked by the embedding layer "
            f"(max score {max(d.score for d in scores):.4f}, threshold {layer.threshold:.4f})"
        )
        blocks += [{"set": name, "id": i, "category": d.category, "score": d.score} for i, d in hits]
    for block in blocks:
        print(f"  {block}")
    if not args.no_save:
        emit("gate_intent", {"threshold": layer.threshold, "archive_posts": len(ids), "blocks": blocks})
    return 0


def timing(args: argparse.Namespace) -> int:
    layer = IntentLayer.load()
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
        emit("gate_intent_time", {"n": args.n, "median_ms": round(median, 5), "p99_ms": round(p99, 5)})
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.bench gate_intent", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="fit the head and calibrate its threshold")
    p_train.add_argument("--k", type=int, default=3, help="nearest exemplars averaged on each side")
    p_train.add_argument(
        "--head", choices=("knn", "linear"), default="linear", help="nearest exemplars or a linear head"
    )
    p_train.add_argument("--l2", type=float, default=1.0, help="the linear head's L2 penalty")
    p_train.add_argument("--margin", type=float, default=0.02, help="added to the top forum score")
    p_train.add_argument(
        "--at-least",
        type=float,
        default=0.0,
        help="lowest threshold (the archive check's highest post score + a margin, when it found one)",
    )
    p_train.add_argument(
        "--benign-rate",
        type=float,
        default=0.005,
        help="look-alikes of tests/gate allowed over the threshold",
    )
    p_archive = sub.add_parser("archive", help="false blocks over the whole Urho3D archive")
    p_time = sub.add_parser("time", help="cost per question")
    p_time.add_argument("--n", type=int, default=2000)
    for p in (p_archive, p_time):
        p.add_argument("--no-save", action="store_true")
    args = parser.parse_args(list(argv))
    commands = {"train": train, "archive": archive, "time": timing}
    result: int = commands[args.command](args)
    return result
