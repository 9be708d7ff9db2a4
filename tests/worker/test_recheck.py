"""The last check before posting (``worker.recheck``): each grain asks its own source of truth."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from worker.domain import Candidate, ForumTopic, Source
from worker.errors import AuthError, NotFoundError, ServiceUnavailableError
from worker.recheck import SourceCheck


def _source(n: int, post_id: int, topic_id: int) -> Source:
    return Source(n, post_id, topic_id, 2, f"t-{topic_id}", f"Topic {topic_id}", "excerpt")


class _Index:
    """Only what ``SourceCheck`` reads of a post index: the eligible posts among some ids."""

    def __init__(self, eligible: dict[int, int]) -> None:
        self.eligible = eligible  # post id -> topic id
        self.asked: list[list[int]] = []

    def posts(self, post_ids: Sequence[int]) -> dict[int, Candidate]:
        self.asked.append(list(post_ids))
        return {
            p: Candidate(p, self.eligible[p], 2, "s", "t", "text") for p in post_ids if p in self.eligible
        }


class _Reader:
    def __init__(self, topics: dict[int, ForumTopic | Exception]) -> None:
        self.topics = topics
        self.reads: list[int] = []

    def get_topic(self, topic_id: int, *, all_posts: bool = False) -> ForumTopic:
        self.reads.append(topic_id)
        got = self.topics[topic_id]
        if isinstance(got, Exception):
            raise got
        return got


def _topic(topic_id: int, **changes: object) -> ForumTopic:
    base: dict[str, object] = dict(
        id=topic_id, title="T", slug="t", category_id=1, archetype="regular", visible=True, deleted=False
    )
    base.update(changes)
    return ForumTopic(**base)  # type: ignore[arg-type]


def test_post_grain_keeps_what_the_index_still_holds_in_the_same_topic() -> None:
    index = _Index({11: 1, 22: 9})  # 22 moved to topic 9, 33 gone (hidden, restricted, deleted)
    check = SourceCheck(index, None)  # type: ignore[arg-type]
    result = check.recheck([_source(1, 11, 1), _source(2, 22, 2), _source(3, 33, 3)], "post")
    assert [s.post_id for s in result.kept] == [11]
    why = dict(result.dropped)
    assert why[22] == "moved to another topic"
    assert why[33].startswith("no longer citable")
    assert set(why) == {22, 33}
    assert index.asked == [[11, 22, 33]]


def test_post_grain_without_an_index_vouches_for_nothing() -> None:
    result = SourceCheck(None, None).recheck([_source(1, 11, 1)], "post")
    assert result.kept == ()
    assert result.changed


def test_topic_grain_reads_each_topic_once_as_the_reader() -> None:
    reader = _Reader(
        {
            1: _topic(1),
            2: _topic(2, visible=False),
            3: NotFoundError("gone", service="discourse"),
            4: AuthError("private category", service="discourse"),
            5: _topic(5, archetype="private_message"),
            6: _topic(6, deleted=True),
        }
    )
    sources = [_source(n, 100 + n, n) for n in range(1, 7)] + [_source(7, 200, 1)]
    result = SourceCheck(None, reader).recheck(sources, "topic")
    assert [s.post_id for s in result.kept] == [101, 200]
    assert dict(result.dropped) == {
        102: "topic unlisted",
        103: "topic not found for the reader",
        104: "topic not readable by the reader",
        105: "private message",
        106: "topic deleted",
    }
    assert reader.reads == [1, 2, 3, 4, 5, 6]


def test_a_failed_check_is_not_a_pass() -> None:
    reader = _Reader({1: ServiceUnavailableError("502", service="discourse")})
    with pytest.raises(ServiceUnavailableError):
        SourceCheck(None, reader).recheck([_source(1, 11, 1)], "topic")


def test_no_sources_cost_nothing() -> None:
    reader = _Reader({})
    assert SourceCheck(None, reader).recheck([], "topic").kept == ()
    assert reader.reads == []
