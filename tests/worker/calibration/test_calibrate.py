"""``citebot calibrate``: the split, the decision, the store the worker reads, and a whole run on the
sample export (real PostgreSQL, the fake embedder)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector

from tests.conftest import make_settings
from tests.worker.calibration.conftest import SAMPLE, calibrate_args, run_calibrate
from tests.worker.retrieval.doubles import angle_vector, insert_post
from worker.calibration import run as calibration_run
from worker.calibration import store
from worker.calibration.questions import (
    CalibrationQuestion,
    half_of_topic,
    shipped_out_of_domain,
    solved_questions,
)
from worker.calibration.run import MIN_SOLVED_TOPICS, decide, wilson
from worker.calibration.store import Calibrations
from worker.errors import ConfigError
from worker.retrieval.lexical import PostgresLexicalIndex
from worker.retrieval.recall import PostgresPostIndex, single_connection
from worker.retrieval.retriever import Retriever
from worker.retrieval.stage import FEATURES, StageModel
from worker.settings import RetrievalSettings
from worker.testing.models import FakeEmbedder


@dataclass(frozen=True)
class Post:
    post_id: int
    topic_id: int
    post_number: int
    cooked: str
    accepted_answer: bool = False


def forum(topics: int) -> list[Post]:
    posts = []
    for t in range(1, topics + 1):
        posts.append(
            Post(t * 10, t, 1, f"<p>Hello all. How do I set up shadows number {t}? It flickers.</p>")
        )
        posts.append(Post(t * 10 + 1, t, 2, "<p>No idea</p>"))
        posts.append(Post(t * 10 + 2, t, 3, "<p>Raise the depth bias</p>", accepted_answer=t % 4 != 0))
    return posts


def test_a_questions_long_and_short_forms_are_always_in_one_half() -> None:
    questions = solved_questions(forum(200))
    by_topic: dict[int, set[str]] = {}
    for q in questions:
        assert q.topic_id is not None
        by_topic.setdefault(q.topic_id, set()).add(q.half)
    assert len(by_topic) == 150  # every fourth topic has no accepted answer
    assert all(len(halves) == 1 for halves in by_topic.values())
    assert {q.half for q in questions} == {"fit", "test"}
    long = {q.id: q for q in questions if not q.short}
    for q in questions:
        if q.short:
            assert long[q.id.removesuffix("/short")].half == q.half
            assert q.gold_post_ids == long[q.id.removesuffix("/short")].gold_post_ids
    # fixed: the same topic lands in the same half on every run and every machine
    assert [half_of_topic(t) for t in (1, 2, 3, 4, 5)] == ["fit", "fit", "fit", "fit", "test"]


def test_a_question_is_the_opening_post_asked_as_a_mention_without_its_own_post() -> None:
    q, short = solved_questions(forum(1))
    assert q.id == "topic-1"
    assert short.id == "topic-1/short"
    assert q.gold_post_ids == (12,)
    assert q.exclude_post_ids == (10,)
    assert q.topic_id == 1
    assert "shadows number 1" in q.text
    assert "It flickers" in q.text
    assert short.text == "How do I set up shadows number 1?"  # greeting dropped, first sentence


def test_the_shipped_out_of_domain_questions_are_english_and_french_in_both_halves() -> None:
    ood = shipped_out_of_domain()
    by_language = {lang: [q for q in ood if q.language == lang] for lang in ("en", "fr")}
    assert all(len(qs) >= 25 for qs in by_language.values())
    assert len({q.id for q in ood}) == len(ood)
    assert all(not q.answerable and q.text.strip() for q in ood)
    for qs in by_language.values():
        assert {q.half for q in qs} == {"fit", "test"}


def test_wilson_interval() -> None:
    lo, hi = wilson(87, 100)
    assert lo == pytest.approx(0.7907, abs=1e-3)
    assert hi == pytest.approx(0.9221, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(10, 10)[1] == 1.0


def test_the_new_fit_replaces_the_weights_in_use_only_when_it_does_at_least_as_well() -> None:
    assert decide(0.8, None, None, force=False)[0] == store.ACTIVATED
    assert decide(0.8, 0.8, "shipped", force=False)[0] == store.ACTIVATED
    decision, reason = decide(0.7, 0.8, "active", force=False)
    assert decision == store.KEPT_ACTIVE
    assert "did better" in reason
    assert "--force" in reason
    assert decide(0.7, 0.8, "active", force=True)[0] == store.FORCED


# -- the store and the worker ------------------------------------------------------------------------


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        register_vector(c)
        yield c


def stage_model(model_set: str, bias: float = 0.0, **weights: float) -> StageModel:
    w = tuple(weights.get(f, 0.0) for f in FEATURES)
    return StageModel(model_set, FEATURES, w, (0.0,) * len(FEATURES), (1.0,) * len(FEATURES), bias)


MODEL_SET = "test-model+lexical-en"


@pytest.mark.integration
def test_the_worker_uses_the_active_calibration_from_its_next_read(conn: psycopg.Connection) -> None:
    insert_post(conn, 1, angle_vector(10), topic_id=1, post_number=2, title="Fog", text="Use a fog end")
    s = RetrievalSettings.model_validate({"recall_k": 2, "stage_k": 10, "sources_k": 3})
    question = "fog end"
    embedder = FakeEmbedder(model="test-model", table={question: angle_vector(0)})
    connections = single_connection(conn)
    index = PostgresPostIndex(connections, s, model="test-model", dimension=8)
    now = [0.0]
    calibrations = Calibrations(connections, ttl_s=60.0, clock=lambda: now[0])
    with Retriever(
        embedder, index, None, None, s, lexical=PostgresLexicalIndex(connections), calibrations=calibrations
    ) as retriever:
        assert not retriever.has_stage_weights()  # nothing shipped for test-model, nothing calibrated
        with pytest.raises(ConfigError, match="citebot calibrate"):
            retriever.stage_model()
        # the top post score is the bias: 1.0 sits between the calibrated thresholds (weak)
        fitted = stage_model(MODEL_SET, bias=1.0, cosine=0.0)
        row = store.record(
            conn,
            model_set=MODEL_SET,
            decision=store.ACTIVATED,
            source="file:x",
            questions={"solved_topics": 120},
            figures={},
            model=fitted,
            abstain_below=0.5,
            weak_below=2.0,
        )
        assert not retriever.has_stage_weights()  # read less than the TTL ago
        now[0] = 61.0
        assert retriever.has_stage_weights()
        assert retriever.stage_model() == fitted
        result = retriever.retrieve(question)  # the shipped route: ranker auto → stage
        stage = result.trace.get("stage")
        assert stage is not None
        assert stage.info["model_set"] == MODEL_SET
        assert result.zone == "weak"  # the calibration's thresholds (the seed's -4 / 0 would say normal)
        assert f"stage_calibrations {row.id}" in retriever.describe()
        # a later run that becomes active replaces it; the older row stays as history, inactive
        store.record(
            conn,
            model_set=MODEL_SET,
            decision=store.FORCED,
            source="file:x",
            questions={},
            figures={},
            model=stage_model(MODEL_SET, bias=3.0),
            abstain_below=0.5,
            weak_below=2.0,
        )
        now[0] = 200.0
        assert retriever.retrieve(question).zone == "normal"
    assert [r.active for r in store.history(conn, MODEL_SET)] == [True, False]


@pytest.mark.integration
def test_an_unreadable_store_keeps_the_last_read_and_answers_go_on(conn: psycopg.Connection) -> None:
    fitted = stage_model(MODEL_SET, bias=1.0)
    store.record(
        conn,
        model_set=MODEL_SET,
        decision=store.ACTIVATED,
        source="file:x",
        questions={},
        figures={},
        model=fitted,
        abstain_below=0.5,
        weak_below=2.0,
    )
    now = [0.0]
    calibrations = Calibrations(single_connection(conn), ttl_s=1.0, clock=lambda: now[0])
    found = calibrations.get(MODEL_SET)
    assert found is not None
    assert found.model == fitted
    conn.execute("ALTER TABLE stage_calibrations RENAME TO stage_calibrations_gone")
    now[0] = 5.0
    again = calibrations.get(MODEL_SET)
    assert again is not None
    assert again.id == found.id


# -- a whole run on the sample export -----------------------------------------------------------------


def fit_worse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next fits worse than any earlier one: their post score reversed."""
    real_fit = calibration_run.fit_model

    def reversed_fit(*args: Any, **kwargs: Any) -> Any:
        fitted = real_fit(*args, **kwargs)
        bad = replace(fitted.model, weights=tuple(-w for w in fitted.model.weights), topic=None)
        return replace(fitted, model=bad)

    monkeypatch.setattr(calibration_run, "fit_model", reversed_fit)


@pytest.mark.integration
@pytest.mark.slow
def test_calibrate_on_the_sample_export_fits_judges_records_and_refuses_to_downgrade(
    indexed_sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = run_calibrate(indexed_sample, tmp_path)
    assert first["decision"] == store.ACTIVATED  # nothing shipped for test-model
    q = first["questions"]
    assert q["solved_topics"] >= 20
    assert q["answerable"]["fit"] > 0
    assert q["answerable"]["test"] > 0
    assert q["out_of_domain"]["fit"] > 0
    assert q["out_of_domain"]["test"] > 0
    test_half = first["figures"]["test_half"]["calibrated"]
    for key in ("topic@5", "post@5", "abstained"):
        f = test_half["all"][key]
        assert f["n"] > 0
        assert f["ci95"][0] <= f["value"] <= f["ci95"][1]
    assert test_half["ood"]["abstained"]["n"] == q["out_of_domain"]["test"]
    # the default model set's shipped weights are judged beside the fit, for reference only
    figures = first["figures"]
    assert figures["reference_model_set"] == "sentence-transformers/all-MiniLM-L6-v2+lexical-en"
    assert figures["test_half"]["reference"]["all"]["topic@5"]["n"] == test_half["all"]["topic@5"]["n"]
    assert figures["in_use_before"] is None
    assert first["reason"] == "no weights were in use for this model set"
    # no question's forms in two halves, and only the fit half was fitted on
    halves: dict[str, set[str]] = {}
    for qid, row in first["per_question"].items():
        halves.setdefault(qid.removesuffix("/short"), set()).add(row["half"])
    assert all(len(h) == 1 for h in halves.values())
    assert 0 < first["figures"]["fit"]["questions"] <= q["answerable"]["fit"]  # the fit half alone
    with psycopg.connect(indexed_sample) as conn:
        active = store.active(conn, MODEL_SET)
    assert active is not None
    assert active.id == first["record_id"]
    assert active.model is not None
    assert "model set test-model+lexical-en: activated" in capsys.readouterr().out

    # a worse fit (its post score reversed) does worse on the test half: refused, the first one stays
    fit_worse(monkeypatch)
    second = run_calibrate(indexed_sample, tmp_path)
    assert second["decision"] == store.KEPT_ACTIVE
    assert "did better" in second["reason"]
    tested = second["figures"]["test_half"]
    assert tested["active"]["merit"] > tested["calibrated"]["merit"]
    with psycopg.connect(indexed_sample) as conn:
        still = store.active(conn, MODEL_SET)
    assert still is not None
    assert still.id == first["record_id"]
    # told to, it replaces them
    third = run_calibrate(indexed_sample, tmp_path, force=True)
    assert third["decision"] == store.FORCED
    with psycopg.connect(indexed_sample) as conn:
        now = store.active(conn, MODEL_SET)
    assert now is not None
    assert now.id == third["record_id"]


@pytest.mark.integration
@pytest.mark.slow
def test_the_nightly_run_fits_only_with_new_solved_topics_and_a_drop_fails_it_and_feeds_the_alert(
    indexed_sample: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`citebot calibrate --if-new N` (the nightly job): nothing fitted or recorded while fewer than N
    solved topics are new; a run whose test half scores the weights in use more than DROP below their
    own fit exits 1, and the worker's gauge citebot_calibration_merit shows both figures (the alert
    CitebotCalibrationDropped in deploy/monitoring/alerts.yaml compares them)."""
    from backfill.calibrate import run
    from worker.metrics import CALIBRATION_MERIT

    settings = make_settings(indexed_sample, "redis://127.0.0.1:1/0")
    first = run_calibrate(indexed_sample, tmp_path)
    assert first["decision"] == store.ACTIVATED

    waited = run_calibrate(indexed_sample, tmp_path, if_new=1)
    assert waited["decision"] == calibration_run.NOT_DUE
    assert "fewer than --if-new 1" in waited["reason"]
    with psycopg.connect(indexed_sample) as conn:
        assert [c.id for c in store.history(conn, MODEL_SET)] == [first["record_id"]]

    # The forum drifted: the weights in use had scored far better when fitted than they do now, and
    # tonight's fit (its post score reversed) is worse still: they stay, and that is a drop.
    fitted_merit = first["figures"]["test_half"]["calibrated"]["merit"]
    with psycopg.connect(indexed_sample) as conn:
        conn.execute(
            "UPDATE stage_calibrations"
            " SET figures = jsonb_set(figures, '{test_half,calibrated,merit}', '0.99') WHERE id = %s",
            (first["record_id"],),
        )
    fit_worse(monkeypatch)
    assert run(settings, calibrate_args(tmp_path), embedder=FakeEmbedder(model="test-model")) == 1
    out = json.loads((tmp_path / "out.json").read_text("utf-8"))
    assert out["decision"] == store.KEPT_ACTIVE
    check = out["figures"]["active_check"]
    assert check == {"calibration": first["record_id"], "at_fit": 0.99, "now": fitted_merit, "dropped": True}

    with psycopg.connect(indexed_sample, autocommit=True) as conn:
        assert Calibrations(single_connection(conn)).get(MODEL_SET) is not None
    assert CALIBRATION_MERIT.labels(MODEL_SET, "at_fit")._value.get() == 0.99
    assert CALIBRATION_MERIT.labels(MODEL_SET, "latest")._value.get() == fitted_merit


@pytest.mark.integration
def test_too_few_solved_topics_keep_the_shipped_weights_and_say_why(
    indexed_sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_calibrate(indexed_sample, tmp_path, min_topics=MIN_SOLVED_TOPICS)
    assert out["questions"]["solved_topics"] < MIN_SOLVED_TOPICS  # the sample has fewer
    assert out["decision"] == store.TOO_LITTLE_DATA
    assert f"below the minimum of {MIN_SOLVED_TOPICS}" in out["reason"]
    assert "shipped weights stay" in out["reason"]
    assert out["model"] is None
    assert out["figures"] == {}
    printed = capsys.readouterr().out
    assert "too_little_data" in printed
    assert "shipped weights stay" in printed
    with psycopg.connect(indexed_sample) as conn:
        assert store.active(conn, MODEL_SET) is None
        (row,) = store.history(conn, MODEL_SET)
    assert row.decision == store.TOO_LITTLE_DATA
    assert not row.active


@pytest.mark.integration
def test_accepted_answers_the_index_may_not_cite_are_not_questions(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export without categories.json, loaded without --public-export: every post is indexed but
    none is citable (its category was never recorded public), so no accepted answer can be found and the
    run says so instead of fitting on questions without an answer."""
    from backfill.run import BackfillOptions, run_backfill
    from backfill.sources.file import FileSource

    settings = make_settings(db_url, "redis://127.0.0.1:1/0")
    run_backfill(
        settings.database,
        FileSource(SAMPLE),  # no assume_public: the categories stay unknown, hence not citable
        FakeEmbedder(model="test-model"),
        BackfillOptions(progress=False),
    )
    out = run_calibrate(db_url, tmp_path)
    assert out["questions"]["solved_topics"] == 0
    assert out["decision"] == store.TOO_LITTLE_DATA
    assert "0 solved topics" in capsys.readouterr().out


def test_min_topics_below_the_floor_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from worker.app.cli import main

    assert main(["calibrate", "--source", "file", "--path", str(SAMPLE), "--min-topics", "3"]) == 2
    assert "at least" in capsys.readouterr().err


def test_collected_halves_split_by_topic_in_the_run() -> None:
    qs = [
        CalibrationQuestion(id=f"topic-{t}{s}", text="x", gold_post_ids=(1,), topic_id=t)
        for t in range(50)
        for s in ("", "/short")
    ]
    halves = {q.id: q.half for q in qs}
    assert all(halves[f"topic-{t}"] == halves[f"topic-{t}/short"] for t in range(50))
    assert np.unique(list(halves.values())).tolist() == ["fit", "test"]


@pytest.mark.integration
def test_solved_topics_read_through_the_api_within_its_budget_count_the_requests(
    db_url: str, tmp_path: Path
) -> None:
    from backfill.calibrate import read_posts
    from tests.backfill.test_api_source import make_source, serve

    with serve(db_url, tmp_path) as double:
        sleeps: list[float] = []
        source = make_source(double, sleeps)
        questions = solved_questions(read_posts(source))
        # every request went through the source's budget and is counted (the double saw the same)
        assert source.requests == len(double.app.calls)
        assert source.requests > 0
    long = {q.topic_id: q for q in questions if not q.short}
    # each topic's post #2 is its accepted answer in the double's export; the opening post is hidden
    assert {t: q.gold_post_ids for t, q in long.items()} == {1: (102,), 2: (202,), 3: (302,)}
    assert long[1].exclude_post_ids == (101,)
    assert "Shadows flicker on my terrain" in long[1].text
