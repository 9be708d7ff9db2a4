"""Flags: Discourse site settings (declared by ``deploy/discourse-plugin``) that steer the bot.

The same read brings the plugin's non-boolean settings, who may summon the bot (``SummonRules``):
``citebot_allowed_groups`` (a ``group_list``: group ids joined by ``|``, as Discourse stores that type;
names are accepted too), ``citebot_min_trust_level`` (an enum of ``TrustLevelSetting``, 0–4) and
``citebot_refusal_notice`` (``none`` or ``short``).

``FlagReader.current()`` returns the flags to use for one job (``state().summon`` the rules):

- values read through the admin API are trusted for ``settings.flags.cache_ttl_s`` (60 s), so an admin's
  change takes effect within a minute, without a restart;
- when a read fails, the last values read hold (the failure is logged and counted) and the read is tried
  again after ``retry_failed_s``, not on every job, so a struggling admin API is not hammered;
- before any successful read the values are not known (``FlagState.known`` is False, origin
  ``defaults``) unless ``enabled`` is pinned by an override: the answer path holds the question (state
  ``held``) and retries it rather than decide on a guess; the defaults (everything off, the cautious
  summon rules) only fill the snapshot;
- a refused credential at start-up (401/403, or the 404 Discourse answers on ``/admin/`` to a wrong
  key or a non-admin) stops the worker (``check_access``), since no later read can succeed;
- an ``override_*`` setting (``CITEBOT_FLAGS__OVERRIDE_RERANK=false``,
  ``CITEBOT_FLAGS__OVERRIDE_MIN_TRUST_LEVEL=2``) pins a value during an incident and wins over everything.

One refresh runs at a time; other threads keep using the current values meanwhile, except before the
first read, when they wait for it (so the first jobs after a start do not all run on defaults).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal, get_args

from prometheus_client import Counter, Gauge

from worker.errors import AuthError, CitebotError, ConfigError, NotFoundError
from worker.settings import FlagsSettings

log = logging.getLogger(__name__)

SETTING_PREFIX = "citebot_"
FLAG_NAMES = ("enabled", "posts_pipeline", "input_gate", "rerank", "post_links", "intent_layer")
SETTING_NAMES = tuple(SETTING_PREFIX + name for name in FLAG_NAMES)
SUMMON_NAMES = ("allowed_groups", "min_trust_level", "refusal_notice")
SUMMON_SETTING_NAMES = tuple(SETTING_PREFIX + name for name in SUMMON_NAMES)
# Everything the reader asks Discourse for, in one request.
PLUGIN_SETTING_NAMES = SETTING_NAMES + SUMMON_SETTING_NAMES

FLAG_READS = Counter("citebot_flag_reads", "Reads of the flag site settings, by outcome.", ["outcome"])
FLAG_VALUE = Gauge("citebot_flag_value", "Flag values in effect (1 on, 0 off).", ["flag"])

SettingsSource = Callable[[Sequence[str]], Mapping[str, object]]
Origin = Literal["defaults", "discourse", "last_known"]

_TRUE = frozenset({"true", "t", "1", "yes", "on"})
_FALSE = frozenset({"false", "f", "0", "no", "off", ""})

RefusalNotice = Literal["none", "short"]
NOTICES: tuple[RefusalNotice, ...] = get_args(RefusalNotice)
# Discourse's trust levels (TrustLevel[0..4]).
TRUST_LEVELS = range(5)


@dataclass(frozen=True, slots=True)
class Flags:
    """The flags; all off by default, so deploying the code changes nothing."""

    enabled: bool = False
    posts_pipeline: bool = False
    input_gate: bool = False
    rerank: bool = False
    post_links: bool = False
    intent_layer: bool = False

    def as_dict(self) -> dict[str, bool]:
        return {f.name: bool(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class SummonRules:
    """Who may summon the bot (``worker.summon`` applies them). The defaults are a cautious admin's:

    - ``allowed_groups`` empty: no group restriction beyond the trust level; otherwise a member must be
      in one of them (group ids or lower-cased names; automatic groups such as ``trust_level_2`` work);
    - ``min_trust_level`` 1: not a brand-new account. TL1 takes minutes of reading (Discourse's default
      ``tl1_requires_*``) and is the floor Discourse itself sets for PMs and anonymous posting, so real
      newcomers reach it at once while scripted sign-ups do not; TL2 would take days of visits and shut
      out the newcomers who ask the most;
    - ``refusal_notice`` ``none``: a refused member sees nothing (``short``: one generic line).
    """

    allowed_groups: tuple[str, ...] = ()
    min_trust_level: int = 1
    refusal_notice: RefusalNotice = "none"

    def as_dict(self) -> dict[str, object]:
        return {
            "allowed_groups": list(self.allowed_groups),
            "min_trust_level": self.min_trust_level,
            "refusal_notice": self.refusal_notice,
        }


@dataclass(frozen=True, slots=True)
class FlagState:
    """Flags in effect, where they came from and which were overridden: what an answer's trace records."""

    flags: Flags
    origin: Origin
    overridden: tuple[str, ...] = ()
    read_at: float | None = None
    summon: SummonRules = SummonRules()
    error: str | None = None  # why the last read failed (type and message, no forum text)

    @property
    def known(self) -> bool:
        """May these values decide a question? Yes once a read succeeded (now or earlier: the last-known
        values), or when ``enabled`` is pinned by an override (the operator took the flags into the
        environment: a bot that is not an admin, an incident; the flags not pinned are off, the summon
        rules the cautious defaults). Otherwise they are a guess."""
        return self.origin != "defaults" or "enabled" in self.overridden

    def trace(self) -> dict[str, object]:
        return {
            "flags": self.flags.as_dict(),
            "origin": self.origin,
            "overridden": list(self.overridden),
            "summon": self.summon.as_dict(),
        }


def parse_flag(value: object) -> bool:
    """A site-setting value as a bool: bools, ``"true"``/``"false"`` (and t/f, 1/0, yes/no, on/off), 0/1.

    Raises ValueError for anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_group_list(value: object) -> tuple[str, ...]:
    """A ``group_list`` value (``"11|14"``, Discourse's storage) or a comma- or pipe-separated list of
    names, as normalised group keys (ids as digits, names lower-cased); ``""``: no groups.

    Raises ValueError for anything but a string or a list of strings/ints."""
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.replace(",", "|").split("|")
    else:
        raise ValueError(f"not a group list: {value!r}")
    return tuple(dict.fromkeys(i.strip().lower() for i in items if i.strip()))


def parse_trust_level(value: object) -> int:
    """A trust level 0–4 (Discourse's ``TrustLevelSetting`` enum sends it as text). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a trust level: {value!r}")
    try:
        level = int(str(value).strip())
    except ValueError:
        raise ValueError(f"not a trust level: {value!r}") from None
    if level not in TRUST_LEVELS:
        raise ValueError(f"not a trust level: {value!r}")
    return level


def parse_notice(value: object) -> RefusalNotice:
    """``none`` or ``short``; ValueError otherwise."""
    text = str(value).strip().lower()
    for notice in NOTICES:
        if text == notice:
            return notice
    raise ValueError(f"not a refusal notice: {value!r}")


_SUMMON_PARSERS: dict[str, Callable[[object], object]] = {
    "allowed_groups": parse_group_list,
    "min_trust_level": parse_trust_level,
    "refusal_notice": parse_notice,
}


def flag_name(name: str) -> str:
    """``posts_pipeline`` or ``citebot_posts_pipeline`` → ``posts_pipeline``; ValueError if unknown."""
    short = name.strip().lower().removeprefix(SETTING_PREFIX).replace("-", "_")
    if short not in FLAG_NAMES:
        raise ValueError(f"unknown flag {name!r}; known: {', '.join(FLAG_NAMES)}")
    return short


def check_access(source: SettingsSource, settings: FlagsSettings) -> None:
    """At start-up: read the plugin's settings once. A refused credential raises ConfigError, one line
    naming the cause, so that the worker stops instead of holding every question: 401/403, or 404,
    which is what Discourse answers on ``/admin/`` for a wrong key or a user who is not an admin (its
    AdminConstraint rescues InvalidAccess and matches no route: lib/admin_constraint.rb). Any other
    failure (the forum restarting, a 5xx, a timeout) is logged and left to the reader, which holds
    questions until a read succeeds. With ``enabled`` pinned in the environment the settings are not
    needed (a bot that is not an admin), and a refusal is only logged."""
    try:
        source(PLUGIN_SETTING_NAMES)
    except (AuthError, NotFoundError) as exc:
        if settings.override_enabled is not None:
            log.warning("site settings unreadable (%s); the flags come from the environment", exc)
            return
        raise ConfigError(
            f"the citebot site settings cannot be read ({exc}): CITEBOT_DISCOURSE__API_KEY must be a "
            "valid key and CITEBOT_DISCOURSE__API_USERNAME an admin"
        ) from exc
    except CitebotError as exc:
        log.warning(
            "site settings unreadable at start (%s); questions are held until a read succeeds",
            exc,
            extra={"stage": "flags"},
        )


def overrides_of(settings: FlagsSettings) -> dict[str, bool]:
    """The flags pinned from the environment."""
    out = {}
    for name in FLAG_NAMES:
        value = getattr(settings, f"override_{name}")
        if value is not None:
            out[name] = bool(value)
    return out


def summon_overrides_of(settings: FlagsSettings) -> dict[str, object]:
    """The summon rules pinned from the environment, parsed as the site settings are."""
    out: dict[str, object] = {}
    for name in SUMMON_NAMES:
        value = getattr(settings, f"override_{name}")
        if value is not None:
            out[name] = _SUMMON_PARSERS[name](value)
    return out


class FlagReader:
    """Cached, fail-safe, thread-safe reader of the flags (see the module docstring)."""

    def __init__(
        self,
        source: SettingsSource,
        settings: FlagsSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        retry_failed_s: float = 10.0,
    ) -> None:
        self._source = source
        self._ttl = settings.cache_ttl_s
        self._retry_failed_s = min(retry_failed_s, settings.cache_ttl_s)
        self._overrides = overrides_of(settings)
        self._summon_overrides = summon_overrides_of(settings)
        self._clock = clock
        self._lock = threading.Lock()
        # One immutable snapshot, swapped atomically: (state, next refresh time).
        self._snapshot: tuple[FlagState, float] = (
            self._with_overrides(Flags(), SummonRules(), "defaults", None),
            -1e300,
        )
        self._tried = False  # a read was attempted: later refreshes no longer block other threads
        self._succeeded = False  # a read succeeded: failures now keep "last known" values

    def current(self) -> Flags:
        """The flags in effect now."""
        return self.state().flags

    def state(self) -> FlagState:
        """The flags in effect now, with their origin (refreshing them when the cache has expired)."""
        state, refresh_at = self._snapshot
        if self._clock() < refresh_at:
            return state
        # The first read is waited for; later refreshes are done by one thread while others go on.
        if self._lock.acquire(blocking=not self._tried):
            try:
                if self._clock() >= self._snapshot[1]:
                    self._refresh()
            finally:
                self._lock.release()
        return self._snapshot[0]

    def refresh(self) -> FlagState:
        """Read the flags now, ignoring the cache."""
        with self._lock:
            self._refresh()
        return self._snapshot[0]

    def _refresh(self) -> None:
        previous = self._snapshot[0]
        now = self._clock()
        try:
            raw = self._source(PLUGIN_SETTING_NAMES)
            flags, bad, missing = self._parse(raw, previous.flags)
            summon, summon_bad, summon_missing = self._parse_summon(raw, previous.summon)
        except Exception as exc:  # any failure keeps the last values: a flag read must never stop a job
            FLAG_READS.labels(outcome="error").inc()
            origin: Origin = "last_known" if self._succeeded else "defaults"
            log.warning(
                "flag read failed (%s: %s); %s values hold",
                type(exc).__name__,
                exc,
                origin.replace("_", " "),
                extra={"stage": "flags"},
            )
            state = replace(previous, origin=origin, error=f"{type(exc).__name__}: {exc}")
            self._snapshot = (state, now + self._retry_failed_s)
            self._tried = True
            return
        bad += summon_bad
        FLAG_READS.labels(outcome="partial" if bad else "ok").inc()
        if bad:
            log.warning("flag settings with unusable values kept their last value: %s", ", ".join(bad))
        if missing:
            log.warning(
                "flag settings not found (is the citebot plugin installed?), off: %s", ", ".join(missing)
            )
        if summon_missing:
            log.warning(
                "summon settings not found (citebot plugin older than the worker?), cautious defaults: %s",
                ", ".join(summon_missing),
            )
        state = self._with_overrides(flags, summon, "discourse", now)
        if state.flags != previous.flags:
            log.info("flags now %s", state.flags.as_dict(), extra={"stage": "flags"})
        if state.summon != previous.summon:
            log.info("summon rules now %s", state.summon.as_dict(), extra={"stage": "flags"})
        self._snapshot = (state, now + self._ttl)
        self._tried = self._succeeded = True

    def _parse(self, raw: Mapping[str, object], last: Flags) -> tuple[Flags, list[str], list[str]]:
        values: dict[str, bool] = {}
        bad, missing = [], []
        for name in FLAG_NAMES:
            setting = SETTING_PREFIX + name
            if setting not in raw:
                values[name] = False  # not declared: plugin missing or older; the safe default
                missing.append(setting)
                continue
            try:
                values[name] = parse_flag(raw[setting])
            except ValueError:
                values[name] = getattr(last, name)
                bad.append(setting)
        return Flags(**values), bad, missing

    def _parse_summon(
        self, raw: Mapping[str, object], last: SummonRules
    ) -> tuple[SummonRules, list[str], list[str]]:
        values: dict[str, object] = {}
        bad, missing = [], []
        for name in SUMMON_NAMES:
            setting = SETTING_PREFIX + name
            if setting not in raw:
                values[name] = getattr(SummonRules(), name)  # not declared: the cautious default
                missing.append(setting)
                continue
            try:
                values[name] = _SUMMON_PARSERS[name](raw[setting])
            except ValueError:
                values[name] = getattr(last, name)
                bad.append(setting)
        return SummonRules(**values), bad, missing  # type: ignore[arg-type]

    def _with_overrides(
        self, flags: Flags, summon: SummonRules, origin: Origin, read_at: float | None
    ) -> FlagState:
        flags = replace(flags, **self._overrides)
        summon = replace(summon, **self._summon_overrides)  # type: ignore[arg-type]
        for name, value in flags.as_dict().items():
            FLAG_VALUE.labels(flag=name).set(1 if value else 0)
        overridden = tuple(sorted([*self._overrides, *self._summon_overrides]))
        return FlagState(flags, origin, overridden, read_at, summon)
