"""fit-stage's numpy side: the saved features, the fit, hit rates, cross-validation, thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eval.evaluation.fit_stage import (
    Collected,
    abstention_threshold,
    answerable_only,
    cross_validated,
    fit,
    fit_abstention,
    hits_at,
    ranked,
    stage_thresholds,
    with_parts,
)
from worker.retrieval.stage import FEATURES, Linear

COL = {f: i for i, f in enumerate(FEATURES)}


def synthetic(questions: int = 60, per: int = 12, seed: int = 19) -> Collected:
    """Each question: one accepted answer (a reply the asker followed, cosine a little above the
    rest) in the gold topic, beside its question post (high cosine, first post) and noise."""
    rng = np.random.default_rng(seed)
    xs, ys, qs, gts, topics, ids = [], [], [], [], [], []
    for q in range(questions):
        ids.append(f"q{q}" + ("/short" if q % 2 else ""))
        for i in range(per):
            x = np.zeros(len(FEATURES))
            x[COL["cosine"]] = rng.normal(0.4, 0.1)
            gold_topic = i < 2
            if i == 0:  # the answer
                x[COL["cosine"]] += 0.08
                x[COL["asker_followed"]] = 1.0
            if i == 1:  # the gold topic's question post
                x[COL["cosine"]] += 0.25
                x[COL["first_post"]] = 1.0
            xs.append(x)
            ys.append(1.0 if i == 0 else 0.0)
            qs.append(q)
            gts.append(1.0 if gold_topic else 0.0)
            topics.append(1000 * q + (0 if gold_topic else i))
    return Collected(
        np.asarray(xs),
        np.asarray(ys),
        np.asarray(qs),
        np.asarray(gts),
        np.asarray(topics),
        tuple(ids),
        {"data": "x"},
    )


def test_the_saved_features_load_back(tmp_path: Path) -> None:
    data = synthetic(questions=3)
    data.save(tmp_path / "f.npz")
    back = Collected.load(tmp_path / "f.npz")
    assert back.questions == data.questions
    assert np.array_equal(back.x, data.x)
    assert np.array_equal(back.topic, data.topic)
    assert back.meta == {"data": "x"}


def test_a_feature_that_tells_the_answer_is_learnt_and_cross_validates() -> None:
    data = synthetic()
    cosine_only = cross_validated(data, ("cosine",), "m")
    with_facts = cross_validated(data, ("cosine", "first_post", "asker_followed"), "m")
    assert with_facts["post_hit@5"] == 1.0
    assert with_facts["post_hit@5"] > cosine_only["post_hit@5"] - 1e-9
    model = fit(data, ("cosine", "first_post", "asker_followed"), "m")
    weights = dict(zip(model.features, model.weights, strict=True))
    assert weights["asker_followed"] > 1.0
    assert weights["first_post"] < 0.0
    assert hits_at(data, model)["topic_hit@5"] == 1.0


def test_topic_hits_count_distinct_topics() -> None:
    data = synthetic(questions=1, per=12)
    model = fit(synthetic(), ("cosine",), "m")
    # rank the gold topic last: 10 other topics come first, so it is not in the first 5
    data.x[:, COL["cosine"]] = np.where(data.gold_topic > 0, -1.0, 1.0)
    assert hits_at(data, model)["topic_hit@5"] == 0.0


def test_thresholds_abstain_on_at_most_five_percent_of_each_slice() -> None:
    data = synthetic(questions=100)
    model = fit(data, ("cosine", "first_post", "asker_followed"), "m")
    abstain, weak, slices = stage_thresholds(data, model)
    assert weak >= abstain
    assert set(slices) == {"long", "short"}
    assert all(s["abstained"] <= 0.05 for s in slices.values())
    assert all(s["n"] == 50 for s in slices.values())
    with pytest.raises(ValueError, match="unknown"):
        fit(data, ("colour",), "m")


def test_excerpt_cosines_from_a_vector_file_are_learnt_and_missing_ones_count_as_the_mean(
    tmp_path: Path,
) -> None:
    import dataclasses

    from eval.evaluation.fit_stage import with_excerpt_cosines

    base = synthetic(questions=40)
    n = len(base.y)
    post = np.arange(n, dtype=np.int64) + 1
    data = dataclasses.replace(base, x=base.x.copy(), post=post)
    data.x[:, COL["excerpt_cosine"]] = np.nan  # collected before the column was filled
    # the second model: the question is e1; an answer's excerpt is near e1, every other post far
    vec = np.zeros((n, 2), np.float32)
    vec[:, 1] = 1.0
    vec[data.y > 0] = (0.9, 0.436)
    np.savez(tmp_path / "v.npz", post_id=post[:-1], vec=vec[:-1])  # the last post has no vector

    class E1:
        model, dimension = "second", 2

        def embed(self, texts: list[str], *, kind: str = "passage") -> list[list[float]]:
            assert kind == "query"
            return [[1.0, 0.0] for _ in texts]

    texts = {q: f"question {q}" for q in data.questions}
    full = with_excerpt_cosines(data, texts, E1(), tmp_path / "v.npz")  # type: ignore[arg-type]
    col = full.x[:, COL["excerpt_cosine"]]
    assert np.isnan(col[-1])
    assert col[data.y > 0] == pytest.approx(0.9)
    model = fit(full, ["cosine", "excerpt_cosine"], "m")
    assert model.weights[1] > 1.0
    assert hits_at(full, model)["post_hit@5"] == 1.0
    with pytest.raises(ValueError, match="no candidate has a value"):
        fit(data, ["cosine", "excerpt_cosine"], "m")
    full.save(tmp_path / "f.npz")
    assert np.array_equal(Collected.load(tmp_path / "f.npz").post, post)


def with_out_of_domain(data: Collected, questions: int = 40, seed: int = 7) -> Collected:
    """``data`` plus out-of-domain questions: candidates whose cosines are all low, none gold."""
    rng = np.random.default_rng(seed)
    per = 12
    x = np.zeros((questions * per, len(FEATURES)))
    x[:, COL["cosine"]] = rng.normal(0.2, 0.08, size=len(x))
    q0 = len(data.questions)
    return Collected(
        np.vstack([data.x, x]),
        np.concatenate([data.y, np.zeros(len(x))]),
        np.concatenate([data.question, q0 + np.repeat(np.arange(questions), per)]),
        np.concatenate([data.gold_topic, np.zeros(len(x))]),
        np.concatenate([data.topic, 10**6 + np.arange(len(x))]),
        (*data.questions, *(f"ood{i}" for i in range(questions))),
        data.meta,
        None,
        np.concatenate([data.answerable_mask(), np.zeros(questions, dtype=bool)]),
    )


def test_out_of_domain_questions_round_trip_and_stay_out_of_the_post_fit(tmp_path: Path) -> None:
    data = synthetic(questions=30)
    both = with_out_of_domain(data)
    both.save(tmp_path / "f.npz")
    back = Collected.load(tmp_path / "f.npz")
    assert back.answerable_mask().sum() == 30
    assert len(back.questions) == 70
    assert synthetic(questions=2).answerable_mask().all()  # features collected before: all answerable
    features = ("cosine", "first_post", "asker_followed")
    assert fit(both, features, "m") == fit(data, features, "m")
    assert hits_at(answerable_only(back), fit(back, features, "m")) == hits_at(data, fit(data, features, "m"))


def test_the_abstention_score_separates_out_of_domain_questions_and_keeps_five_percent() -> None:
    data = with_out_of_domain(synthetic(questions=100), questions=60)
    features = ("cosine", "first_post", "asker_followed")
    cv = cross_validated(data, features, "m", question_features=("top", "top_cosine"))
    oof = cv["oof"]
    assert not np.isnan(oof).any()
    _threshold, slices = abstention_threshold(data, oof)
    assert slices["long"]["abstained"] <= 0.05
    assert slices["short"]["abstained"] <= 0.05
    assert slices["ood"]["n"] == 60
    assert slices["ood"]["abstained"] >= 0.9
    model = with_parts(
        data,
        fit(data, features, "m"),
        topic_features=None,
        within=1.0,
        question_features=("top", "top_cosine"),
        l2=1.0,
    )
    assert model.abstention is not None
    assert model.topic is None
    assert dict(zip(model.abstention.features, model.abstention.weights, strict=True))["top_cosine"] > 0
    with pytest.raises(ValueError, match="out-of-domain"):
        fit_abstention(synthetic(questions=10), model)


def test_a_topic_score_learns_that_pooled_replies_beat_a_lone_one() -> None:
    """Each question: the gold topic has three replies a little below one distractor reply, and its
    answer among them (asker_followed); pooled, the gold topic is found first."""
    rng = np.random.default_rng(3)
    xs, ys, qs, gts, topics, ids = [], [], [], [], [], []
    for q in range(80):
        ids.append(f"q{q}")
        for i in range(8):
            x = np.zeros(len(FEATURES))
            gold = i < 3
            x[COL["cosine"]] = (0.55 if gold else 0.6 if i == 3 else 0.3) + rng.normal(0, 0.01)
            x[COL["asker_followed"]] = 1.0 if i == 0 else 0.0
            xs.append(x)
            ys.append(1.0 if i == 0 else 0.0)
            qs.append(q)
            gts.append(1.0 if gold else 0.0)
            topics.append(1000 * q + (0 if gold else i))
    data = Collected(
        np.asarray(xs), np.asarray(ys), np.asarray(qs), np.asarray(gts), np.asarray(topics), tuple(ids), {}
    )
    alone = cross_validated(data, ("cosine",), "m")
    pooled = cross_validated(data, ("cosine",), "m", topic_features=("best", "pooled", "count"))
    assert alone["topic_hit@5"] == 1.0  # both are found in five topics; what differs is the first
    post_model = fit(data, ("cosine",), "m")
    model = with_parts(
        data,
        post_model,
        topic_features=("best", "pooled", "count"),
        within=1.0,
        question_features=None,
        l2=1.0,
    )
    first_alone = np.mean([data.gold_topic[o[0]] for o in ranked(data, post_model)])
    first_pooled = np.mean([data.gold_topic[o[0]] for o in ranked(data, model)])
    assert first_alone < 0.2
    assert first_pooled > 0.9
    assert pooled["topic_hit@5"] == 1.0


def test_fit_stage_from_collected_features_fits_all_three_parts_and_reports_out_of_fold(
    tmp_path: Path,
) -> None:
    from eval.evaluation.fit_stage import fit_stage
    from eval.evaluation.runner import RetrievalRun

    data = with_out_of_domain(synthetic(questions=100), questions=60)
    data.x[:, COL["excerpt_cosine"]] = np.nan  # collected without the second model's column
    data.save(tmp_path / "f.npz")
    run = RetrievalRun(forum=None, questions=(), configs=(), out=tmp_path / "out")
    # no excerpt cosine among the post features: the default topic and question features drop theirs
    fitted = fit_stage(
        run,
        "m",
        write=False,
        features=("cosine", "first_post", "asker_followed"),
        collected=tmp_path / "f.npz",
    )
    assert "best_excerpt" not in fitted["model"]["topic"]["features"]
    assert "top_excerpt" not in fitted["model"]["abstention"]["features"]
    assert fitted["out_of_domain_questions"] == 60
    assert fitted["questions"] == 100
    out_of_fold = fitted["abstention_fit"]["fit_half_out_of_fold"]
    assert out_of_fold["long"]["abstained"] <= 0.05
    assert out_of_fold["ood"]["abstained"] >= 0.9
    assert fitted["model"]["abstention"]["abstain_below"] == pytest.approx(
        fitted["abstention_fit"]["abstain_below"], abs=1e-3
    )
    # what fit-stage writes loads back: no figure of the fit overwrites a part of the weights
    import dataclasses

    from worker.retrieval.stage import load_model, write_model

    figures = {k: v for k, v in fitted.items() if k != "model"}
    model = fit(data, ("cosine", "first_post", "asker_followed"), "m")
    abstention = Linear.from_dict(fitted["model"]["abstention"])
    write_model(dataclasses.replace(model, abstention=abstention), figures, path=tmp_path / "w.json")
    assert load_model("m", path=tmp_path / "w.json").abstention == abstention


def test_the_excerpt_cosines_refit_knows_the_out_of_domain_training_questions(tmp_path: Path) -> None:
    """``fit-stage --from-features … --fit-questions … --excerpt-cosines-from``: the features hold the
    --fit-questions' rows too, so their texts must be looked up (it raised KeyError: 'ood-fit-095')."""
    from eval.__main__ import question_texts

    dev = tmp_path / "dev.jsonl"
    dev.write_text(
        json.dumps(
            {
                "id": "q1",
                "question": "How do I load a scene? I tried the editor first and it failed.",
                "gold_post_ids": [1],
                "gold_topic_ids": [1],
            }
        )
        + "\n"
    )
    ood = tmp_path / "ood-fit.jsonl"
    ood.write_text(
        json.dumps({"id": "ood-fit-095", "question": "Best pizza in Naples?", "tags": ["out_of_domain"]})
        + "\n"
    )
    texts = question_texts([dev, ood])
    assert texts["ood-fit-095"] == "Best pizza in Naples?"
    assert "q1" in texts
    assert any(k.startswith("q1") and k != "q1" for k in texts)  # the short form, as the fit collects it


def test_a_lower_share_leaves_a_margin_below_the_target() -> None:
    data = with_out_of_domain(synthetic(questions=100), questions=60)
    oof = cross_validated(data, ("cosine", "first_post"), "m", question_features=("top", "top_cosine"))["oof"]
    target, at_target = abstention_threshold(data, oof)
    margin, with_margin = abstention_threshold(data, oof, 0.02)
    assert margin <= target
    for part in ("long", "short"):
        assert with_margin[part]["abstained"] <= 0.02
        assert with_margin[part]["abstained"] <= at_target[part]["abstained"]
