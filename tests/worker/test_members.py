"""``MemberDirectory``: reads cached for the TTL, then read again; a penalty takes effect within it."""

from __future__ import annotations

from worker.members import MemberDirectory
from worker.settings import SummonSettings
from worker.testing.forum import FakeForum


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_member_is_read_once_per_ttl_and_a_silence_shows_after_it() -> None:
    forum, clock = FakeForum(), Clock()
    forum.set_member(42, "alice", trust_level=2)
    directory = MemberDirectory(forum, SummonSettings(member_cache_ttl_s=60), clock=clock)
    assert directory.member(42, "alice").trust_level == 2  # type: ignore[union-attr]
    forum.set_member(42, "alice", trust_level=2, silenced=True)
    clock.now += 59
    assert not directory.member(42, "alice").silenced  # type: ignore[union-attr]
    clock.now += 1
    assert directory.member(42, "alice").silenced  # type: ignore[union-attr]
    assert forum.user_reads == [42, 42]
    assert directory.reads == 2


def test_ttl_zero_reads_every_time_and_unknown_accounts_are_none() -> None:
    forum = FakeForum()
    directory = MemberDirectory(forum, SummonSettings(member_cache_ttl_s=0))
    assert directory.member(9, "ghost") is None
    assert directory.member(9, "ghost") is None
    assert forum.user_reads == [9, 9]


def test_the_fallback_reads_the_public_profile_which_cannot_see_a_silence() -> None:
    forum = FakeForum()
    forum.bot_is_staff = False
    forum.set_member(42, "alice", trust_level=2, silenced=True)
    directory = MemberDirectory(forum, SummonSettings(public_profile_fallback=True))
    seen = directory.member(42, "alice")
    assert seen is not None
    assert (seen.silenced, seen.complete) == (False, False)
    assert forum.user_reads == [42, "alice"]
