from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.evaluation.configs import CONFIGS, DEFAULT, UnknownConfigError, parse_configs
from eval.evaluation.datasets import DatasetError, Question, load_questions, read_questions


def line(**kw: object) -> str:
    return json.dumps(kw)


def test_questions_parse_with_gold_and_out_of_domain() -> None:
    qs = read_questions(
        [
            line(
                id="a",
                question="q?",
                gold_post_ids=[2],
                gold_topic_ids=[1],
                exclude_post_ids=[9],
                tags=["answerable"],
            ),
            "",
            line(
                id="o", question="boil an egg?", gold_post_ids=[], gold_topic_ids=[], tags=["out_of_domain"]
            ),
        ]
    )
    assert [q.id for q in qs] == ["a", "o"]
    assert qs[0].answerable
    assert not qs[0].out_of_domain
    assert qs[0].exclude_post_ids == (9,)
    assert qs[1].out_of_domain
    assert not qs[1].answerable


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        (line(id="a", question=""), "non-empty"),
        (line(id="a", question="q", gold_post_ids=["x"]), "gold_post_ids"),
        (line(id="a", question="q", tags=["answerable"]), "no gold"),
    ],
)
def test_bad_questions_are_refused_with_the_line(text: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message) as info:
        read_questions([text], "f.jsonl")
    assert "f.jsonl:1" in str(info.value)


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(line(id="x", question="q", gold_topic_ids=[1]) + "\n")
    with pytest.raises(DatasetError, match="duplicate"):
        load_questions([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])


def test_configs_by_name_default_and_all() -> None:
    assert [c.name for c in parse_configs("posts, legacy")] == ["posts", "legacy"]
    assert [c.name for c in parse_configs("default")] == list(DEFAULT)
    assert len(parse_configs(["all"])) == len(CONFIGS)
    assert not CONFIGS["legacy"].use_posts
    assert CONFIGS["posts+keyword+rerank+neighbours"].route.neighbours == 1
    stage = CONFIGS["posts+lexical+stage"].route
    assert (stage.lexical, stage.ranker, stage.keyword) == (True, "stage", False)
    assert CONFIGS["posts+lexical+stage"].scores_zones
    assert CONFIGS["posts+keyword+rerank"].scores_zones
    assert not CONFIGS["lexical"].use_vector
    assert not CONFIGS["posts"].scores_zones
    with pytest.raises(UnknownConfigError, match="unknown configuration 'bm25'"):
        parse_configs("posts,bm25")


def test_shipped_runs_exactly_the_worker_defaults() -> None:
    """``--configs shipped`` is the default route: the one the worker runs with its flags on."""
    from worker.retrieval.route import Route

    shipped = CONFIGS["shipped"]
    assert shipped.route == Route()
    assert (shipped.route.lexical, shipped.route.keyword, shipped.route.ranker) == (True, False, "auto")
    assert shipped.scores_zones
    assert parse_configs("shipped,posts,lexical")[0] is shipped
    assert DEFAULT[0] == "shipped"


def test_short_form_is_the_first_sentence_that_says_something() -> None:
    from eval.evaluation.datasets import (
        SHORT,
        first_sentence,
        half_of,
        short_form,
        slice_of,
        with_short_forms,
    )

    long_text = (
        "Hi, folks!\n\ni'm curious how this portal effect may be created? Two worlds and a character "
        "going from one to the other.\n\nMore details follow here."
    )
    assert first_sentence(long_text) == "i'm curious how this portal effect may be created?"
    assert len(first_sentence("word " * 100)) <= 160
    assert first_sentence("Help me. It crashes on start when I load a scene.") == (
        "Help me. It crashes on start when I load a scene."
    )  # under four words: the next sentence comes along
    q = Question("q1", long_text, gold_post_ids=(5,), gold_topic_ids=(1,), tags=("answerable",))
    s = short_form(q)
    assert s.id == "q1/short"
    assert SHORT in s.tags
    assert s.gold_post_ids == (5,)
    assert half_of(s.id) == half_of(q.id)  # the short form stays in its long form's half
    assert slice_of(s.tags) == "short"
    assert slice_of(q.tags) == "long"
    assert slice_of(("out_of_domain", "near_domain")) == "near_domain"
    ood = Question("o1", "How do I boil an egg?", tags=("out_of_domain",))
    assert [x.id for x in with_short_forms([q, ood])] == ["q1", "o1", "q1/short"]


def test_the_halves_split_the_dev_ids_about_evenly() -> None:
    from eval.evaluation.datasets import half_of

    halves = [half_of(f"urho-{i}") for i in range(400)]
    assert 160 < halves.count("fit") < 240


def test_fit_only_questions_stay_in_the_fit_half_whatever_their_id() -> None:
    from eval.evaluation.datasets import fit_only, half_of

    ids = [f"ood-fit-{i}" for i in range(40)]
    assert {half_of(i) for i in ids} == {"fit", "test"}  # by their ids, half would be held out
    extra = fit_only([Question(i, "How do I boil an egg?", tags=("out_of_domain",)) for i in ids])
    assert {q.half for q in extra} == {"fit"}
