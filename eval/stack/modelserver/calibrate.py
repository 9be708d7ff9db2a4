"""Fit the bi-encoder scorer's calibration: cosine → relevance logit, on labelled forum questions.

    python -m eval.stack.modelserver.calibrate [--data DIR] [--pool N] [--cache F.npz] [--out F.json]

The zone thresholds are logits of a cross-encoder: −4 (≈ 2 % relevant: abstain) and 0 (50 %: weak
below). For the embedding model's cosine to stand in for one, we fit ``logit = a·cos + b`` by logistic
regression (numpy, Newton/IRLS). Texts are what the reranker reads: topic title + first 300
characters of the post. The candidates are a pool of posts: every post of the dev questions' gold
topics plus ``--pool`` posts of random other topics (the question's own first post hidden).

Two kinds of data:

- pairs: an in-domain dev question vs its gold accepted answer (positive); vs the 3 posts of other
  topics closest to it (hard negatives) and 3 random posts of other topics (negatives); an
  out-of-domain question vs the 3 posts closest to it (negatives).
- top candidates, one per question: the pool post with the highest cosine, relevant when it belongs
  to the gold topic (the bot would cite it); never relevant for out-of-domain questions.

Class balance. A fit on pairs has the prior of however many negatives we sampled, which means
nothing. The zone reads the score of the *top* candidate, so what the logit must mean is "P(relevant)
for a top candidate". Three fits are tried — the pairs with positives weighted to the top-candidate
relevance rate; the pairs' slope with the intercept refitted on the top candidates; the top candidates
alone — and each is scored by its log-loss on the top candidates of held-out questions (two folds by
question). The best is kept and written, with the others' figures, to ``calibration.json``. The prior
is then the dev set's: 348 answerable questions, 34 out-of-domain ones. Real traffic has more
unanswerable questions, so the logit is, if anything, optimistic.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.evaluation.datasets import URHO3D
from eval.stack.modelserver.models import CALIBRATION_PATH, SHIPPED_MODEL_ID, EmbeddingModel
from worker.html_text import html_to_text
from worker.retrieval.rerank import rerank_text

log = logging.getLogger(__name__)

DEFAULT_DATA = URHO3D
_FRENCH = frozenset(
    [
        "comment",
        "quel",
        "quelle",
        "quels",
        "est",
        "le",
        "la",
        "les",
        "une",
        "des",
        "du",
        "pour",
        "mon",
        "faire",
        "peux-tu",
        "avec",
    ]
)


@dataclass(frozen=True, slots=True)
class Post:
    id: int
    topic_id: int
    text: str  # what the reranker reads


def load_posts(topic_file: Path) -> list[Post]:
    topic = json.loads(topic_file.read_text(encoding="utf-8"))
    out = []
    for p in topic["post_stream"]["posts"]:
        if p.get("post_type") != 1 or p.get("deleted_at") or p.get("hidden"):
            continue
        out.append(Post(p["id"], topic["id"], rerank_text(topic["title"], html_to_text(p["cooked"]), 300)))
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, ridge: float = 1e-6) -> tuple[float, float]:
    """Weighted logistic regression ``P(y=1) = σ(a·x + b)`` by Newton's method (IRLS)."""
    X = np.column_stack([x, np.ones_like(x)])
    beta = np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(X @ beta)))
        grad = X.T @ (w * (y - p)) - ridge * beta
        hess = (X * (w * p * (1 - p))[:, None]).T @ X + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(beta[0]), float(beta[1])


@dataclass(frozen=True, slots=True)
class Pairs:
    cos: np.ndarray
    label: np.ndarray
    question: np.ndarray  # question index, for the split


def similarities(data: Path, pool_size: int, seed: int, cache: Path | None) -> tuple[np.ndarray, ...]:
    """Cosine of every dev question (in-domain, then out-of-domain) with every post of the pool.

    The pool: every post of the gold topics plus ``pool_size`` posts of random other topics. Cached
    in ``cache`` (an .npz) when given, since embedding the pool takes minutes on a small CPU.
    """
    if cache is not None and cache.exists():
        with np.load(cache) as saved:
            return saved["sims"], saved["ids"], saved["topics"]
    rng = random.Random(seed)
    questions, ood = load_questions(data)
    gold_topics = {t for q in questions for t in q["gold_topic_ids"]}
    others = sorted(p for p in (data / "topics").glob("*.json") if int(p.stem) not in gold_topics)
    rng.shuffle(others)
    posts: list[Post] = []
    for t in sorted(gold_topics):
        posts.extend(load_posts(data / "topics" / f"{t}.json"))
    n_gold_topic_posts = len(posts)
    for f in others:
        if len(posts) - n_gold_topic_posts >= pool_size:
            break
        posts.extend(load_posts(f))
    log.info("pool: %d posts (%d from gold topics)", len(posts), n_gold_topic_posts)
    model = EmbeddingModel()
    qv = model.embed([q["question"] for q in questions] + [q["question"] for q in ood])
    pv = model.embed([p.text for p in posts])
    sims = qv @ pv.T
    ids = np.array([p.id for p in posts])
    topics = np.array([p.topic_id for p in posts])
    if cache is not None:
        np.savez_compressed(cache, sims=sims, ids=ids, topics=topics)
    return sims, ids, topics


def load_questions(data: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    questions = [json.loads(line) for line in (data / "eval/questions-dev.jsonl").open(encoding="utf-8")]
    ood = [json.loads(line) for line in (data / "eval/out-of-domain-dev.jsonl").open(encoding="utf-8")]
    return questions, ood


def build(
    data: Path, sims: np.ndarray, ids: np.ndarray, topics: np.ndarray, hard: int, rand: int, seed: int
) -> tuple[Pairs, Pairs, list[tuple[str, float]]]:
    """The training pairs, the top-candidate records, and (question, top cosine) of out-of-domain ones."""
    rng = random.Random(seed + 1)
    questions, ood = load_questions(data)
    cos: list[float] = []
    label: list[int] = []
    qidx: list[int] = []
    top_cos: list[float] = []
    top_label: list[int] = []
    top_q: list[int] = []
    for i, q in enumerate(questions):
        gold = set(q["gold_post_ids"])
        own_topic = np.isin(topics, q["gold_topic_ids"])
        is_gold = np.isin(ids, list(gold))
        row = np.where(np.isin(ids, q.get("exclude_post_ids", [])), -np.inf, sims[i])
        for j in np.flatnonzero(is_gold):
            cos.append(float(sims[i, j]))
            label.append(1)
            qidx.append(i)
        other = np.flatnonzero(~own_topic)
        for j in other[np.argsort(-sims[i, other])[:hard]]:
            cos.append(float(sims[i, j]))
            label.append(0)
            qidx.append(i)
        for j in rng.sample(list(other), rand):
            cos.append(float(sims[i, j]))
            label.append(0)
            qidx.append(i)
        best = int(np.argmax(row))
        top_cos.append(float(row[best]))
        top_label.append(int(own_topic[best]))  # a post of the gold topic: the bot would cite it
        top_q.append(i)
    ood_top: list[tuple[str, float]] = []
    for k, q in enumerate(ood):
        i = len(questions) + k
        order = np.argsort(-sims[i])[:hard]
        for j in order:
            cos.append(float(sims[i, j]))
            label.append(0)
            qidx.append(i)
        top_cos.append(float(sims[i, order[0]]))
        top_label.append(0)
        top_q.append(i)
        ood_top.append((q["question"], float(sims[i, order[0]])))
    pairs = Pairs(np.array(cos), np.array(label, dtype=float), np.array(qidx))
    tops = Pairs(np.array(top_cos), np.array(top_label, dtype=float), np.array(top_q))
    return pairs, tops, ood_top


def fit(pairs: Pairs, prior: float) -> tuple[float, float]:
    """Fit on pairs with positives carrying ``prior`` of the total weight."""
    pos = pairs.label == 1
    w = np.where(pos, prior / pos.sum(), (1 - prior) / (~pos).sum()) * len(pairs.label)
    return fit_logistic(pairs.cos, pairs.label, w)


def fit_intercept(x: np.ndarray, y: np.ndarray, a: float) -> float:
    """The intercept ``b`` maximising the likelihood of ``σ(a·x + b)`` with the slope held.

    The score ``Σ(y − σ(a·x + b))`` falls as ``b`` grows, so bisection finds its root safely.
    """
    lo, hi = -60.0, 60.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if float((y - 1.0 / (1.0 + np.exp(-np.clip(a * x + mid, -500, 500)))).sum()) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


METHODS = ("pairs", "pairs-slope-top-intercept", "top-candidates")


def fit_method(method: str, pairs: Pairs, tops: Pairs) -> tuple[float, float]:
    """One of three ways to fit; all are checked on top candidates and the best held-out one kept.

    ``pairs``: the pairs, positives weighted to the top-candidate relevance rate.
    ``pairs-slope-top-intercept``: the slope from the pairs, the intercept refitted on top candidates
    (the pairs say how relevance grows with the cosine; the top candidates say where it stands).
    ``top-candidates``: both from the top candidates alone (one per question).
    """
    prior = float(tops.label.mean())
    if method == "pairs":
        return fit(pairs, prior)
    if method == "pairs-slope-top-intercept":
        a, _ = fit(pairs, prior)
        return a, fit_intercept(tops.cos, tops.label, a)
    return fit_logistic(tops.cos, tops.label, np.ones_like(tops.cos))


def evaluate(a: float, b: float, tops: Pairs) -> dict[str, float]:
    """On top candidates: mean P vs observed, precision/recall of logit ≥ 0 and ≥ −4, log-loss."""
    logit = a * tops.cos + b
    p = 1 / (1 + np.exp(-np.clip(logit, -500, 500)))
    y = tops.label
    out: dict[str, float] = {
        "n": float(len(y)),
        "observed_rate": float(y.mean()),
        "mean_p": float(p.mean()),
        "log_loss": float(-np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))),
    }
    for name, t in (("0", 0.0), ("-4", -4.0)):
        sel = logit >= t
        out[f"precision_at_{name}"] = float(y[sel].mean()) if sel.any() else float("nan")
        out[f"recall_at_{name}"] = float((sel & (y == 1)).sum() / max(1, (y == 1).sum()))
        out[f"passing_at_{name}"] = float(sel.mean())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.stack.modelserver.calibrate", description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="forum data directory")
    parser.add_argument("--pool", type=int, default=15000, help="posts from other topics in the pool")
    parser.add_argument("--hard", type=int, default=3, help="hard negatives per question")
    parser.add_argument("--random", type=int, default=3, help="random negatives per question")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--out", type=Path, default=CALIBRATION_PATH)
    parser.add_argument("--cache", type=Path, default=None, help="an .npz keeping the cosines between runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    sims, ids, topics = similarities(args.data, args.pool, args.seed, args.cache)
    pairs, tops, ood_top = build(args.data, sims, ids, topics, args.hard, args.random, args.seed)
    in_domain = tops.question < int(tops.question.max()) + 1 - len(ood_top)
    prior = float(tops.label.mean())

    # Two-fold check by question: fit on one half, evaluate on the other's top candidates.
    methods: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        folds = []
        for half in (0, 1):
            train, test = pairs.question % 2 == half, tops.question % 2 != half
            t_train = tops.question % 2 == half
            fa, fb = fit_method(method, _subset(pairs, train), _subset(tops, t_train))
            folds.append(evaluate(fa, fb, _subset(tops, test)))
        a, b = fit_method(method, pairs, tops)
        methods[method] = {
            "a": round(a, 4),
            "b": round(b, 4),
            "in_sample": {k: round(v, 4) for k, v in evaluate(a, b, tops).items()},
            "two_fold": {k: round(float(np.nanmean([f[k] for f in folds])), 4) for k in folds[0]},
        }
    chosen = min(METHODS, key=lambda m: float(methods[m]["two_fold"]["log_loss"]))
    a, b = float(methods[chosen]["a"]), float(methods[chosen]["b"])
    in_sample = methods[chosen]["in_sample"]
    held_out = methods[chosen]["two_fold"]
    pair_p = 1 / (1 + np.exp(-(a * pairs.cos + b)))
    ood: list[dict[str, Any]] = [
        {"question": q, "top_cosine": round(c, 4), "logit": round(a * c + b, 3), "french": _is_french(q)}
        for q, c in ood_top
    ]
    result: dict[str, Any] = {
        "a": round(a, 4),
        "b": round(b, 4),
        "model_id": SHIPPED_MODEL_ID,
        "formula": "logit = a * cosine + b; P(relevant) = sigmoid(logit)",
        "cosine_at_logit": {"-4": round((-4 - b) / a, 4), "0": round(-b / a, 4)},
        "fitted": {
            "date": dt.date.today().isoformat(),
            "data": "urho3d eval/questions-dev.jsonl + eval/out-of-domain-dev.jsonl",
            "method": chosen,
            "chosen_by": "lowest two-fold log-loss on top candidates",
            "prior_top_candidate_relevant": round(prior, 4),
            "top_candidate_relevant_in_domain": round(float(tops.label[in_domain].mean()), 4),
            "pool_posts": int(args.pool),
            "pairs": len(pairs.label),
            "positives": int(pairs.label.sum()),
            "hard_negatives_per_question": args.hard,
            "random_negatives_per_question": args.random,
            "seed": args.seed,
            "questions": int(in_domain.sum()),
            "out_of_domain_questions": len(ood_top),
            "mean_p_positive_pairs": round(float(pair_p[pairs.label == 1].mean()), 4),
            "mean_p_negative_pairs": round(float(pair_p[pairs.label == 0].mean()), 4),
        },
        "top_candidate_in_sample": in_sample,
        "top_candidate_two_fold": held_out,
        "methods": methods,
        "out_of_domain": {
            "abstained_at_-4": sum(o["logit"] < -4 for o in ood),
            "below_0": sum(o["logit"] < 0 for o in ood),
            "french": {
                "n": sum(o["french"] for o in ood),
                "abstained_at_-4": sum(o["french"] and o["logit"] < -4 for o in ood),
                "mean_top_cosine": round(float(np.mean([o["top_cosine"] for o in ood if o["french"]])), 4),
            },
            "english": {
                "n": sum(not o["french"] for o in ood),
                "abstained_at_-4": sum((not o["french"]) and o["logit"] < -4 for o in ood),
                "mean_top_cosine": round(
                    float(np.mean([o["top_cosine"] for o in ood if not o["french"]])), 4
                ),
            },
            "questions": ood,
        },
    }
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("a", "b", "cosine_at_logit")}), "method:", chosen)
    for method, figures in methods.items():
        print(f"  {method}: a={figures['a']} b={figures['b']} two-fold {json.dumps(figures['two_fold'])}")
    print("top candidates, in sample:", json.dumps(result["top_candidate_in_sample"]))
    print("top candidates, two-fold: ", json.dumps(result["top_candidate_two_fold"]))
    print(
        "out of domain:", json.dumps({k: v for k, v in result["out_of_domain"].items() if k != "questions"})
    )
    return 0


def _subset(p: Pairs, mask: np.ndarray) -> Pairs:
    return Pairs(p.cos[mask], p.label[mask], p.question[mask])


def _is_french(text: str) -> bool:
    return any(w in _FRENCH for w in text.lower().replace("?", " ").split())


if __name__ == "__main__":
    sys.exit(main())
