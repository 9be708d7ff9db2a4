"""``python -m eval fit-stage``: fit the second stage's weights on the forum's solved topics.

The fitting half of the development questions (``Question.half == "fit"``, long and short forms) runs
through the second-stage configuration with provisional weights (cosine alone: the candidate set, the
first ``stage_k`` fused posts, does not depend on the weights); every candidate's features and whether
it is an accepted answer of the question's topic are collected here, and the fit itself is
``worker.calibration.fit`` (the one ``citebot calibrate`` runs): the weights are written with the fit's
figures to ``worker/retrieval/stage_weights.json`` under the run's model set. The ``test`` half is
never seen here: ``python -m eval retrieval`` reports the held-out figures.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from eval.evaluation.configs import CONFIGS, STAGE, STAGE_EXCERPT, Config
from eval.evaluation.datasets import Question
from eval.evaluation.runner import RetrievalRun, run_retrieval
from worker.calibration.fit import (  # noqa: F401  (re-exported: the eval's tests and scripts use them)
    L2,
    MAX_ABSTAINED,
    Collected,
    FeatureRows,
    abstention_threshold,
    answerable_only,
    check_features,
    check_parts,
    cross_validated,
    fit,
    fit_abstention,
    fit_model,
    fit_topic,
    hits_at,
    logistic_regression,
    provisional,
    question_rows,
    ranked,
    scores_of,
    stage_thresholds,
    top_scores,
    with_parts,
)
from worker.protocols import Embedder
from worker.retrieval.aggregate import write_thresholds
from worker.retrieval.retriever import RetrievalResult
from worker.retrieval.stage import FEATURES, QUESTION_FEATURES, TOPIC_FEATURES, WITHOUT_CE, write_model

log = logging.getLogger(__name__)


def collect_features(run: RetrievalRun, model_set: str) -> Collected:
    """The fit half through the second stage under provisional weights (the candidate set does not
    depend on the weights), every candidate's features recorded; out-of-domain questions too (the
    abstention model's negatives: their candidates are all labelled 0)."""
    rows = FeatureRows()

    def collect(q: Question, config: Config, result: RetrievalResult) -> None:
        rows.add(q.id, q.answerable, q.gold_post_ids, q.gold_topic_ids, result)

    stage_run = replace(
        run,
        configs=(CONFIGS[STAGE_EXCERPT if run.excerpt_model else STAGE],),
        half="fit",
        stage_model=provisional(model_set),
        collect=collect,
        write_thresholds=False,
    )
    results = run_retrieval(stage_run)
    meta = {
        "data": ", ".join(Path(q).name for q in run.questions)
        + f" — the fit half only (long and short forms); forum {results['meta']['forum']} "
        f"({results['meta']['posts_indexed']} posts)",
    }
    return rows.collected(meta)


def with_excerpt_cosines(
    data: Collected, questions: Mapping[str, str], embedder: Embedder, vectors: Path
) -> Collected:
    """``data`` with its ``excerpt_cosine`` column computed from a file of excerpt vectors (``post_id``,
    ``vec``: the eval's cache of the column, ``eval.evaluation.excerpt_cache``) and ``embedder``'s
    vector of each question (``questions``: id → text). The candidate set does not depend on that
    feature, so this equals collecting again with the column filled from the same vectors, without
    running retrieval a second time. Candidates without a vector get NaN (the mean), as in the stage."""
    if data.post is None:
        raise ValueError("these features were collected without post ids: collect them again")
    with np.load(vectors) as f:
        ids, vecs = f["post_id"], np.asarray(f["vec"], dtype=np.float32)
    row = {int(p): i for i, p in enumerate(ids)}
    qv = np.asarray(embedder.embed([questions[q] for q in data.questions], kind="query"), np.float32)
    col = FEATURES.index("excerpt_cosine")
    x = data.x.copy()
    for i, (qi, pid) in enumerate(zip(data.question, data.post, strict=True)):
        r = row.get(int(pid))
        x[i, col] = float(qv[qi] @ vecs[r]) if r is not None else np.nan
    meta = {**data.meta, "excerpt_cosine": f"{embedder.model} question vectors x {vectors.name}"}
    return replace(data, x=x, meta=meta)


def fit_stage(
    run: RetrievalRun,
    model_set: str,
    *,
    l2: float = L2,
    write: bool = True,
    features: Sequence[str] = WITHOUT_CE,
    collected: Path | None = None,
    topic_features: Sequence[str] | None = TOPIC_FEATURES,
    within: float = 1.0,
    question_features: Sequence[str] | None = QUESTION_FEATURES,
    max_abstained: float = MAX_ABSTAINED,
) -> dict[str, Any]:
    """Collect the fit half's candidate features (or read them from ``collected``), fit them
    (``worker.calibration.fit.fit_model``) and (``write``) record the weights and zone thresholds; the
    features are saved to ``run.out/features.npz`` for refits."""
    check_parts(features, topic_features, question_features)  # before a retrieval run, not after it
    if collected is not None:
        data = Collected.load(collected)
    else:
        data = collect_features(run, model_set)
        run.out.mkdir(parents=True, exist_ok=True)
        data.save(run.out / "features.npz")
    fitted = fit_model(
        data,
        model_set,
        l2=l2,
        features=features,
        topic_features=topic_features,
        within=within,
        question_features=question_features,
        max_abstained=max_abstained,
    )
    figures = fitted.figures
    if write:
        write_model(fitted.model, figures)
        write_thresholds(
            fitted.model.scorer_id,
            fitted.abstain_below,
            fitted.weak_below,
            {
                "fitted": figures["fitted"],
                "data": f"{figures['data']}; answerable questions only (python -m eval fit-stage)",
                "fit_half_in_sample": {"slices": fitted.slices},
            },
        )
        log.info("second-stage weights and zone thresholds for %s written", model_set)
    return {"model": fitted.model.as_dict(), **figures}
