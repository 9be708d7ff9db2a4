"""Conversation-shaped questions in the eval: parsed, asked as the worker asks them, reported apart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from eval.evaluation.configs import CONFIGS
from eval.evaluation.datasets import DatasetError, read_questions, with_short_forms
from eval.evaluation.evaluate import run_one, slices
from eval.evaluation.report import shapes_table
from worker.domain import Candidate
from worker.question import thread_question
from worker.retrieval.retriever import RetrievalResult
from worker.trace import Trace

ROWS = [
    {
        "id": "c-new",
        "question": "@citebot how do I set them up?",
        "title": "Cascaded shadows for the sun light",
        "shape": "new_topic",
        "gold_topic_ids": [20],
    },
    {
        "id": "c-reply",
        "question": "@citebot can you help with this one?",
        "title": "Sound stops after loading a scene",
        "thread": ["When I load a new scene every sound stops playing.", "Same here on Android."],
        "shape": "reply_mention",
        "gold_topic_ids": [22],
    },
    {
        "id": "c-follow",
        "question": "That didn't work, any other idea?",
        "title": "Cascaded shadows for the sun light",
        "thread": ["@citebot how do I set up cascaded shadows for the sun light?", "(bot answer)"],
        "shape": "follow_up",
        "gold_topic_ids": [21],
        "exclude_post_ids": [2002],
    },
    {"id": "c-short", "question": "shadow cascades?", "shape": "short_direct", "gold_topic_ids": [21]},
]


def _questions() -> list[Any]:
    return read_questions([json.dumps(r) for r in ROWS], "conv.jsonl")


def test_a_conversation_row_is_asked_as_the_worker_builds_it() -> None:
    new, reply, follow, short = _questions()
    assert new.asked().text == "Cascaded shadows for the sun light\n\nhow do I set them up?"
    assert reply.asked() == thread_question(reply.question, "citebot", title=reply.title, thread=reply.thread)
    assert reply.asked().opening == "When I load a new scene every sound stops playing."
    assert reply.asked().replied_to == "Same here on Android."
    assert follow.asked().shape == "follow_up"
    assert follow.asked().earlier_question == "how do I set up cascaded shadows for the sun light?"
    assert short.asked().text == "shadow cascades?"
    assert [q.shape for q in (new, reply, follow, short)] == [
        "new_topic",
        "reply_mention",
        "follow_up",
        "short_direct",
    ]


def test_a_conversation_question_gets_no_short_form() -> None:
    plain = read_questions(
        [json.dumps({"id": "p", "question": "A long question. Two.", "gold_topic_ids": [1]})]
    )
    assert [q.id for q in with_short_forms([*plain, *_questions()])] == [
        "p",
        "c-new",
        "c-reply",
        "c-follow",
        "c-short",
        "p/short",
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"title": 3}, "title must be a string"),
        ({"thread": "one post"}, "thread must be a list"),
        ({"shape": ""}, "shape must be"),
        ({"shape": "follow_up"}, "needs the earlier question in thread"),
    ],
)
def test_bad_conversation_fields_are_refused(row: dict[str, object], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        read_questions([json.dumps({"id": "x", "question": "q", "gold_topic_ids": [1], **row})])


class _Retriever:
    """Records what ``run_one`` asks; answers with the gold topic first."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Sequence[int]]] = []

    def retrieve(
        self, question: str, *, exclude_post_ids: Sequence[int] = (), **_: object
    ) -> RetrievalResult:
        self.asked.append((question, tuple(exclude_post_ids)))
        first = Candidate(post_id=2101, topic_id=21, post_number=1, topic_slug="t", topic_title="t", text="")
        return RetrievalResult((), "normal", "post", (first,), Trace())


def test_the_eval_asks_the_built_question_and_reports_each_shape_apart() -> None:
    retriever = _Retriever()
    config = next(iter(CONFIGS.values()))
    outcomes = [run_one(retriever, q, config, {}) for q in _questions()]  # type: ignore[arg-type]
    assert retriever.asked[0][0] == "Cascaded shadows for the sun light\n\nhow do I set them up?"
    assert retriever.asked[2][1] == (2002,)  # what the bot cited before stays out
    assert [o.shape for o in outcomes] == ["new_topic", "reply_mention", "follow_up", "short_direct"]
    table = slices(outcomes, [config])[config.name]
    assert table["shape:follow_up/all"]["topic_hit@5"] == 1.0
    assert table["shape:new_topic/all"]["topic_hit@5"] == 0.0
    assert table["long/all"]["n"] == 4
    rendered = shapes_table({config.name: table})
    assert "| follow_up | 1 |" in rendered
    assert shapes_table({config.name: {"long/all": {"n": 1}}}) == ""
