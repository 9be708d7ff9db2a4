"""``MemberDirectory``: who an account is on the forum (trust level, groups, penalties), read once and
trusted briefly, for the summon policy (``worker.summon``).

One read per account per ``summon.member_cache_ttl_s`` (60 s by default): a member asking ten questions
in a minute costs one admin-API request, and a silence or a suspension takes effect within that time.
The read is ``GET /admin/users/{id}.json`` (every field, staff only). Discourse mounts its admin routes
under ``StaffConstraint`` (config/routes.rb), so a bot account without staff rights gets 404 there,
exactly as for an account that no longer exists (403 is mapped the same way, in case a proxy answers
it). Either way, with ``summon.public_profile_fallback`` the directory reads ``GET /u/{username}.json``
instead (no silenced field, ``staged`` hidden: the ``Member`` is not ``complete``); without it the
account cannot be verified and the policy refuses (fail closed). Transient errors propagate: the
question is retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from worker.domain import Member
from worker.errors import AuthError, NotFoundError
from worker.settings import SummonSettings

log = logging.getLogger(__name__)

# Enough for every active member of a large forum within one TTL; expired entries go first.
MAX_ENTRIES = 10_000


class MemberSource(Protocol):
    """The forum reads a directory needs (``DiscourseClient`` and ``FakeForum`` implement them)."""

    def get_user(self, user_id: int) -> Member: ...

    def get_user_by_username(self, username: str) -> Member: ...


class MemberDirectory:
    """Thread-safe, time-bounded cache of ``Member`` reads (see the module docstring)."""

    def __init__(
        self,
        source: MemberSource,
        settings: SummonSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._ttl = settings.member_cache_ttl_s
        self._fallback = settings.public_profile_fallback
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[float, Member | None]] = {}
        self.reads = 0  # forum requests made (tests and the budget notes read it)

    def member(self, user_id: int, username: str) -> Member | None:
        """The account that wrote a post, or None when it cannot be verified (see the module docstring)."""
        return self._cached(("id", str(user_id)), lambda: self._read_member(user_id, username))

    def bot(self, username: str) -> Member | None:
        """The bot's own account (its groups decide whether a group's PM includes it). Read by name: the
        account reading itself sees all of its groups, staff or not."""
        return self._cached(("name", username.lower()), lambda: self._read_by_name(username))

    def _cached(self, key: tuple[str, str], read: Callable[[], Member | None]) -> Member | None:
        now = self._clock()
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and now < hit[0]:
            return hit[1]
        value = read()
        if self._ttl > 0:
            with self._lock:
                if len(self._entries) >= MAX_ENTRIES:
                    self._evict(now)
                self._entries[key] = (now + self._ttl, value)
        return value

    def _evict(self, now: float) -> None:
        """Drop expired entries, then the oldest half if that freed too little (lock held)."""
        for key in [k for k, (until, _) in self._entries.items() if until <= now]:
            del self._entries[key]
        if len(self._entries) >= MAX_ENTRIES:
            by_age = sorted(self._entries, key=lambda k: self._entries[k][0])
            for key in by_age[: len(by_age) // 2]:
                del self._entries[key]

    def _read_member(self, user_id: int, username: str) -> Member | None:
        self.reads += 1
        try:
            return self._source.get_user(user_id)
        except (NotFoundError, AuthError) as exc:
            if not self._fallback:
                log.warning(
                    "GET /admin/users/%d.json answered %s: the author is not verified and not answered"
                    " (an account deleted, or a bot account without staff rights: make it an admin, or set"
                    " CITEBOT_SUMMON__PUBLIC_PROFILE_FALLBACK=true)",
                    user_id,
                    exc.status or type(exc).__name__,
                )
                return None
        return self._read_by_name(username)

    def _read_by_name(self, username: str) -> Member | None:
        self.reads += 1
        try:
            return self._source.get_user_by_username(username)
        except NotFoundError:
            return None
