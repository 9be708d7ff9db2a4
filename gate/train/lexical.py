"""Fit the gate's lexical head: ``gate/lexical.json`` (``gate/lexical_head.py``), from ``make gate``
(``python -m gate.build``, with the settings it records in ``gate/manifest.json``).

- :func:`train` fits it on:

  - harmful (label 1): the harmful lines of every training set (``gate.train.data``:
    ``eval/data/gate/training/``, the exemplars, the regression sets, the held-out sets already tuned
    on and the written training sets); never the untouched held-out sets (``UNTUNED_HELDOUT``, in
    ``eval/data/gate/untouched/``), which stay for measuring;
  - look-alikes (label 0): the benign lines of the same files;
  - forum text (label 0): every unit (sentence, pair of sentences) of every post of the Urho3D
    archive and of the 1,000 forum questions of ``python -m eval.bench gate``.

  Each group weighs a third of the loss; L2 penalty; L-BFGS from zero (deterministic). Features:
  those seen in at least ``--min-count`` labelled lines. Every ``--forum-stride``-th forum unit is
  fitted on; every one is scored for the threshold. The threshold on the logit is the highest
  of: the top forum unit + ``--margin`` (in sample: the forum is training data), and the logit that
  lets ``--benign-rate`` of the look-alikes through *out of fold* (5 folds), + ``--look-margin``.
  The category model is
  a softmax regression on the harmful lines. The veto: the logit under which ``--veto-rate`` of the
  harmful lines that benign-reading rules block score out of fold, less ``--veto-margin`` (it may lie
  above the bias: a question the head knows no feature of is never vetoed). The out-of-fold logits
  of the training lines are kept in ``.cache/gate-lexical/out-of-fold.json`` with the head's digest:
  the embedding layer's fit reads them next (``gate.train.intent``).

``python -m eval.bench gate_lexical archive`` is the false-block check of the result.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gate import Gate, lexical_head, normalize
from gate.lexical_head import LexicalHead, features, units
from gate.train.data import FORUM, TUNED_HELDOUT, archive_posts, forum_questions, training_rows

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "gate-lexical"
OUT = REPO / "gate" / "lexical.json"
OUT_OF_FOLD = "out-of-fold.json"
"""In ``CACHE``: the last fit's out-of-fold logit of every training line and the digest of its head."""

HARMFUL, LOOK_ALIKE, FORUM_TEXT = 0, 1, 2


def labelled() -> list[tuple[str, str | None]]:
    """(text, category or None for benign) of every line the head may learn from
    (``gate/train/data.py``)."""
    return [(row.text, row.category) for row in training_rows()]


def archive_texts(root: Path = FORUM) -> tuple[list[int], list[str]]:
    """Every archive post (id, text; ``gate.train.data.archive_posts``), cached in
    ``.cache/gate-lexical/``."""
    cache = CACHE / "archive.json"
    if cache.exists():
        data = json.loads(cache.read_text(encoding="utf-8"))
        return data["ids"], data["texts"]
    ids, texts = archive_posts(root)
    CACHE.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"ids": ids, "texts": texts}), encoding="utf-8")
    return ids, texts


def forum_matrix(vocab: dict[str, int], posts: Sequence[str]) -> Any:
    """Every unit of every archive post and forum question over ``vocab``, cached per vocabulary."""
    from scipy.sparse import load_npz, save_npz

    key = (
        inspect.getsource(lexical_head.units)
        + inspect.getsource(lexical_head._unit_words)
        + "\n".join(sorted(vocab))
    )
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    cache = CACHE / f"forum-units-{digest}.npz"
    if cache.exists():
        return load_npz(cache).tocsr()
    matrix = Matrix(vocab)
    for text in [*posts, *forum_questions(FORUM, 1000)]:
        for unit in units(normalize(text)):
            matrix.add(features(unit))
    result = matrix.csr()
    CACHE.mkdir(parents=True, exist_ok=True)
    save_npz(cache, result)
    return result


class Matrix:
    """Rows of feature sets as a sparse 0/1 matrix over a fixed vocabulary."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.indptr = [0]
        self.indices: list[int] = []

    def add(self, feats: Sequence[str]) -> None:
        self.indices.extend(sorted({self.vocab[f] for f in feats if f in self.vocab}))
        self.indptr.append(len(self.indices))

    def csr(self) -> Any:
        from scipy.sparse import csr_matrix

        data = np.ones(len(self.indices), dtype=np.float64)
        return csr_matrix((data, self.indices, self.indptr), shape=(len(self.indptr) - 1, len(self.vocab)))


def fit_binary(x: Any, y: Any, weight: Any, l2: float) -> tuple[Any, float]:
    """Weighted logistic regression with an L2 penalty on the weights (not the bias), by L-BFGS."""
    from scipy.optimize import minimize

    n_features = x.shape[1]

    def loss(theta: Any) -> tuple[float, Any]:
        w, b = theta[:-1], theta[-1]
        z = x @ w + b
        # log(1 + e^z) - y z, stably
        value = float(np.sum(weight * (np.logaddexp(0.0, z) - y * z))) + 0.5 * l2 * float(w @ w)
        p = 1.0 / (1.0 + np.exp(-z))
        r = weight * (p - y)
        grad = np.empty(n_features + 1)
        grad[:-1] = x.T @ r + l2 * w
        grad[-1] = r.sum()
        return value, grad

    result = minimize(loss, np.zeros(n_features + 1), jac=True, method="L-BFGS-B", options={"maxiter": 300})
    return result.x[:-1], float(result.x[-1])


def fit_softmax(x: Any, labels: Any, n_classes: int, l2: float) -> tuple[Any, Any]:
    """Softmax regression (weights features x classes, bias per class), by L-BFGS."""
    from scipy.optimize import minimize

    n, d = x.shape
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), labels] = 1.0

    def loss(theta: Any) -> tuple[float, Any]:
        w = theta[: d * n_classes].reshape(d, n_classes)
        b = theta[d * n_classes :]
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        logsum = np.log(np.exp(z).sum(axis=1, keepdims=True))
        value = float(-(onehot * (z - logsum)).sum()) + 0.5 * l2 * float((w * w).sum())
        p = np.exp(z - logsum)
        r = p - onehot
        grad_w = x.T @ r + l2 * w
        return value, np.concatenate([np.asarray(grad_w).ravel(), r.sum(axis=0)])

    result = minimize(
        loss, np.zeros(d * n_classes + n_classes), jac=True, method="L-BFGS-B", options={"maxiter": 500}
    )
    return result.x[: d * n_classes].reshape(d, n_classes), result.x[d * n_classes :]


def train(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    rows = labelled()
    row_feats = [features(normalize(text)) for text, _ in rows]
    counts: dict[str, int] = {}
    for feats in row_feats:
        for f in set(feats):
            counts[f] = counts.get(f, 0) + 1
    vocab = {f: i for i, f in enumerate(sorted(f for f, c in counts.items() if c >= args.min_count))}
    labelled_m = Matrix(vocab)
    for feats in row_feats:
        labelled_m.add(feats)
    # Every forum unit is scored for the threshold; every --forum-stride-th is fitted on, and so are
    # the units the first fits score highest (hard negatives, --mine rounds).
    _, posts = archive_texts()
    x_all_forum = forum_matrix(vocab, posts)
    from scipy.sparse import vstack

    forum_units = x_all_forum.shape[0]
    fitted = np.zeros(forum_units, dtype=bool)
    fitted[:: args.forum_stride] = True
    x_lab = labelled_m.csr()
    harmful = np.array([category is not None for _, category in rows])
    y_lab = harmful.astype(np.float64)
    group_lab = np.where(harmful, HARMFUL, LOOK_ALIKE)
    sizes = {HARMFUL: int(harmful.sum()), LOOK_ALIKE: int((~harmful).sum()), FORUM_TEXT: 0}
    for mining in range(args.mine + 1):
        x_forum = x_all_forum[fitted]
        sizes[FORUM_TEXT] = x_forum.shape[0]
        total = sum(sizes.values())
        w_lab = np.array([total / (3 * sizes[g]) for g in group_lab])
        w_forum = np.full(x_forum.shape[0], total / (3 * sizes[FORUM_TEXT]))
        x = vstack([x_lab, x_forum]).tocsr()
        y = np.concatenate([y_lab, np.zeros(x_forum.shape[0])])
        weight = np.concatenate([w_lab, w_forum])
        w, b = fit_binary(x, y, weight, args.l2)
        if mining < args.mine:
            fitted[np.argsort(-(x_all_forum @ w + b))[: args.mine_top]] = True
    # Out of fold: each labelled line scored by a head fitted without its fold (the forum always in).
    # A question is scored on its best unit, so its out-of-fold score is its best unit's too.
    unit_m = Matrix(vocab)
    unit_row: list[int] = []
    for i, (text, _) in enumerate(rows):
        for unit in units(normalize(text)) or [""]:
            unit_m.add(features(unit))
            unit_row.append(i)
    x_units, owner = unit_m.csr(), np.array(unit_row)
    fold = np.arange(len(rows)) % 5
    oof = np.full(len(rows), -np.inf)
    for k in range(5):
        keep = np.concatenate([fold != k, np.ones(x_forum.shape[0], dtype=bool)])
        wk, bk = fit_binary(x[keep], y[keep], weight[keep], args.l2)
        scores = x_units @ wk + bk
        mine = fold[owner] == k
        np.maximum.at(oof, owner[mine], scores[mine])
    forum_scores = x_all_forum @ w + b
    forum_top = float(forum_scores.max())
    look = np.sort(oof[~harmful])
    allowed = int(args.benign_rate * len(look))
    look_threshold = float(look[len(look) - allowed - 1]) + 1e-4
    threshold = max(forum_top + args.margin, look_threshold + args.look_margin)
    # The veto (gate/lexical_head.py): under it, a hit of a rule with a benign reading is dropped. Set
    # from the lines such rules block: at most --veto-rate of the harmful ones score under it out of
    # fold, less --veto-margin.
    rules_gate = Gate.load(lexical=False)
    strict = {rule.id: rule.strict for rule in rules_gate.rules.rules}
    decisions = [rules_gate.check(text) for text, _ in rows]
    vetoable = np.array([d.hit and not strict[str(d.rule_id)] for d in decisions])
    veto = None
    veto_info: dict[str, Any] = {}
    if args.veto_rate >= 0:
        # A question the head knows no feature of is never vetoed (LexicalHead.vetoes: no evidence
        # of a look-alike), so the veto may lie above the bias; it is counted the same way here.
        known = np.zeros(len(rows), dtype=bool)
        known[owner[np.diff(x_units.indptr) > 0]] = True
        caught = np.sort(oof[harmful & vetoable & known])
        veto = float(caught[int(args.veto_rate * len(caught))]) - args.veto_margin
        veto_info = {
            "veto": (
                f"the logit under which {int(args.veto_rate * len(caught))} of the {len(caught)} harmful "
                f"lines that benign-reading rules block (and the head knows a feature of) score out of "
                f"fold ({veto + args.veto_margin:.3f}), - {args.veto_margin}; never a question the head "
                f"knows no feature of"
            ),
            "out_of_fold_vetoed_harmful": int((caught < veto).sum()),
            "out_of_fold_vetoed_look_alikes": int((oof[~harmful & vetoable & known] < veto).sum()),
            "look_alikes_blocked_by_such_rules": int((~harmful & vetoable).sum()),
        }
    CACHE.mkdir(parents=True, exist_ok=True)
    # Category model on the harmful lines.
    categories = sorted({c for _, c in rows if c is not None})
    labels = np.array([categories.index(c) for _, c in rows if c is not None])
    cw, cb = fit_softmax(x_lab[harmful], labels, len(categories), args.l2)
    names = sorted(vocab, key=vocab.__getitem__)
    weights = {f: float(w[i]) for f, i in vocab.items() if abs(w[i]) >= 1e-3}
    harmful_feats = np.asarray(x_lab[harmful].sum(axis=0)).ravel() > 0
    category_weights = {
        names[i]: [float(v) for v in cw[i]]
        for i in range(len(names))
        if harmful_feats[i] and np.abs(cw[i]).max() >= 0.05
    }
    info = {
        "method": "logistic regression over word, stem and stem-pair features of each unit "
        "(gate/lexical_head.py), fitted by gate/train/lexical.py; category by a softmax regression "
        "on the harmful lines",
        "training": {
            "harmful": sizes[HARMFUL],
            "look_alikes": sizes[LOOK_ALIKE],
            "forum_units": forum_units,
            "forum_units_fitted": x_forum.shape[0],
            "archive_posts": len(posts),
            "features": len(vocab),
            "min_count": args.min_count,
            "l2": args.l2,
            "tuned_heldout": list(TUNED_HELDOUT),
            "hard_negative_rounds": args.mine,
            "hard_negatives_per_round": args.mine_top,
        },
        "calibration": (
            f"threshold = max(highest logit of the {forum_units} forum units (in sample) "
            f"{forum_top:.3f} + {args.margin}, the logit that keeps {allowed} of the {len(look)} "
            f"look-alikes at or above it out of fold: {look_threshold:.3f} + {args.look_margin})"
        ),
        "out_of_fold_harmful_recall": round(float((oof[harmful] >= threshold).mean()), 4),
        "out_of_fold_look_alikes_blocked": int((oof[~harmful] >= threshold).sum()),
        **veto_info,
    }
    head = LexicalHead(
        weights=weights,
        bias=b,
        threshold=threshold,
        categories=categories,
        category_weights=category_weights,
        category_bias=[float(v) for v in cb],
        info=info,
        veto=veto,
    )
    out = Path(args.out)
    text = json.dumps(head.to_json(), separators=(",", ":")) + "\n"
    out.write_text(text, encoding="utf-8")
    # The out-of-fold logits of the training lines, for the embedding layer's fit (gate.train.intent
    # reads them as the lexical head's score of a question it has not seen), with the digest
    # of the head they belong to.
    (CACHE / OUT_OF_FOLD).write_text(
        json.dumps(
            {
                "lexical_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "texts": [t for t, _ in rows],
                "harmful": harmful.tolist(),
                "oof": oof.tolist(),
            }
        ),
        encoding="utf-8",
    )
    print(f"wrote {out} in {time.perf_counter() - started:.0f} s: {json.dumps(info, indent=1)}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The fit's settings (``gate.build`` passes the recorded ones)."""
    p_train = argparse.ArgumentParser(prog="gate.train.lexical", description=__doc__.split("\n")[0])
    p_train.add_argument("--min-count", type=int, default=2, help="labelled lines a feature needs")
    p_train.add_argument("--l2", type=float, default=1.0)
    p_train.add_argument(
        "--benign-rate", type=float, default=0.005, help="look-alikes allowed through, out of fold"
    )
    p_train.add_argument("--margin", type=float, default=0.5, help="above the top forum unit")
    p_train.add_argument("--look-margin", type=float, default=0.5, help="above the look-alikes' quantile")
    p_train.add_argument("--forum-stride", type=int, default=10, help="fit on every N-th forum unit")
    p_train.add_argument("--mine", type=int, default=2, help="rounds of hard forum negatives")
    p_train.add_argument("--mine-top", type=int, default=2000, help="top-scoring forum units added per round")
    p_train.add_argument(
        "--veto-rate", type=float, default=0.005, help="harmful rule hits allowed under the veto (<0: none)"
    )
    p_train.add_argument("--veto-margin", type=float, default=0.5, help="subtracted from the veto's quantile")
    p_train.add_argument("--out", default=str(OUT))
    return p_train
