"""Public tags only (backfill/tags.py): which tags an anonymous reader may not see, from the tag groups
as Discourse serializes them (TagGroupSerializer), and the worker's cache of them."""

from __future__ import annotations

import pytest

from backfill.tags import HiddenTags, hidden_tag_names, parse_tag_groups, public_tags
from tests.backfill.conftest import make_post
from worker.domain import TagGroup
from worker.errors import AuthError, ServiceUnavailableError


def test_current_and_older_tag_group_shapes() -> None:
    current = {
        "tag_groups": [
            {"id": 1, "name": "Staff", "tags": [{"id": 1, "name": "escalated", "slug": "escalated"}],
             "permissions": {"3": 1}},
            {"id": 2, "name": "Read-only", "tags": [{"id": 2, "name": "triaged"}],
             "permissions": {"0": 3, "3": 1}},
            {"id": 3, "name": "No rows", "tags": [{"id": 3, "name": "kind"}], "permissions": {}},
        ]
    }  # fmt: skip
    older = {"tag_groups": [
        {"name": "Mods", "tag_names": ["moderated"], "permissions": {"staff": 1}},
        {"name": "All", "tag_names": ["open"], "permissions": {"everyone": 1}},
    ]}  # fmt: skip
    assert hidden_tag_names(parse_tag_groups(current)) == {"escalated"}
    assert hidden_tag_names(parse_tag_groups(older)) == {"moderated"}


def test_a_tag_any_of_whose_groups_everyone_may_see_is_public() -> None:
    groups = [TagGroup("Staff", ("a", "b"), everyone=False), TagGroup("Open", ("b",), everyone=True)]
    assert hidden_tag_names(groups) == {"a"}
    post = make_post(1, tags=("a", "b", "c"))
    assert public_tags(post, hidden_tag_names(groups)).tags == ("b", "c")
    assert public_tags(post, frozenset()) is post


def test_the_worker_reads_tag_groups_at_most_once_per_ttl() -> None:
    reads: list[int] = []
    now = [0.0]

    def load() -> list[TagGroup]:
        reads.append(1)
        return [TagGroup("Staff", ("a",), everyone=False)]

    hidden = HiddenTags(load, ttl_s=300, clock=lambda: now[0])
    assert hidden() == {"a"}
    now[0] = 299
    assert hidden() == {"a"}
    assert len(reads) == 1
    now[0] = 300
    hidden()
    assert len(reads) == 2


def test_a_refusal_keeps_the_tags_and_an_outage_retries() -> None:
    def refused() -> list[TagGroup]:
        raise AuthError("403", service="discourse", status=403)

    def down() -> list[TagGroup]:
        raise ServiceUnavailableError("502", service="discourse")

    assert HiddenTags(refused)() == frozenset()  # not staff: Discourse already filtered for it
    with pytest.raises(ServiceUnavailableError):
        HiddenTags(down)()
