"""Flags: cache TTL, last known values on failure, safe defaults, overrides, parsing; the flags command."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import httpx
import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr

from worker.app.cli import main
from worker.app.commands.flags import set_flag, show_flags
from worker.clients.discourse import DiscourseClient
from worker.errors import ServiceUnavailableError
from worker.flags import (
    PLUGIN_SETTING_NAMES,
    SETTING_NAMES,
    FlagReader,
    Flags,
    SummonRules,
    flag_name,
    parse_flag,
    parse_group_list,
    parse_notice,
    parse_trust_level,
)
from worker.settings import DiscourseSettings, FlagsSettings

ALL_ON = dict.fromkeys(SETTING_NAMES, True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Source:
    """Site settings as the Discourse client returns them; raises what is queued in ``fail``."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self.values = dict(values)
        self.calls: list[tuple[str, ...]] = []
        self.fail: Exception | None = None

    def __call__(self, names: Sequence[str]) -> Mapping[str, object]:
        self.calls.append(tuple(names))
        if self.fail is not None:
            raise self.fail
        return {k: v for k, v in self.values.items() if k in names}


def flags_settings(**overrides: object) -> FlagsSettings:
    return FlagsSettings.model_validate({"cache_ttl_s": 60, **overrides})


def reads(outcome: str) -> float:
    return REGISTRY.get_sample_value("citebot_flag_reads_total", {"outcome": outcome}) or 0.0


# -- parsing -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("false", False),
        ("TRUE", True),
        (" t ", True),
        ("f", False),
        ("1", True),
        ("0", False),
        ("on", True),
        ("off", False),
        ("", False),
        (1, True),
        (0, False),
    ],
)
def test_parse_flag(value: object, expected: bool) -> None:
    assert parse_flag(value) is expected


@pytest.mark.parametrize("value", ["maybe", 2, None, 1.0, [True]])
def test_parse_flag_refuses_the_rest(value: object) -> None:
    with pytest.raises(ValueError, match="not a boolean"):
        parse_flag(value)


def test_flag_names() -> None:
    assert flag_name("citebot_post_links") == "post_links"
    assert flag_name("Posts-Pipeline") == "posts_pipeline"
    with pytest.raises(ValueError, match="unknown flag 'citebot_turbo'"):
        flag_name("citebot_turbo")


# -- reader ------------------------------------------------------------------------------------------


def test_values_come_as_bools_or_strings() -> None:
    source = Source(
        {
            "citebot_enabled": "true",
            "citebot_posts_pipeline": True,
            "citebot_input_gate": "false",
            "citebot_rerank": "t",
            "citebot_post_links": False,
        }
    )
    state = FlagReader(source, flags_settings(), clock=Clock()).state()
    assert state.flags == Flags(
        enabled=True, posts_pipeline=True, input_gate=False, rerank=True, post_links=False
    )
    assert state.origin == "discourse"
    assert source.calls == [PLUGIN_SETTING_NAMES]  # the flags and the summon rules: one request
    assert state.trace() == {
        "flags": state.flags.as_dict(),
        "origin": "discourse",
        "overridden": [],
        "summon": {"allowed_groups": [], "min_trust_level": 1, "refusal_notice": "none"},
    }


def test_cached_for_the_ttl_then_read_again() -> None:
    clock, source = Clock(), Source(ALL_ON)
    reader = FlagReader(source, flags_settings(), clock=clock)
    assert reader.current().rerank is True
    source.values["citebot_rerank"] = "false"
    clock.now += 59.9
    assert reader.current().rerank is True
    assert len(source.calls) == 1
    clock.now += 0.1
    assert reader.current().rerank is False
    assert len(source.calls) == 2


def test_safe_defaults_before_any_successful_read() -> None:
    clock, source = Clock(), Source(ALL_ON)
    source.fail = ServiceUnavailableError("down", service="discourse", status=502)
    errors = reads("error")
    reader = FlagReader(source, flags_settings(), clock=clock)
    state = reader.state()
    assert state.flags == Flags()
    assert state.origin == "defaults"
    assert reads("error") == errors + 1
    clock.now += 10
    assert reader.state().origin == "defaults"  # a second failure is still "defaults", not "last known"
    source.fail = None
    clock.now += 10
    assert reader.current() == Flags(True, True, True, True, True, True)


def test_last_known_values_hold_on_failure_and_the_read_is_retried_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, source = Clock(), Source(ALL_ON)
    reader = FlagReader(source, flags_settings(), clock=clock, retry_failed_s=10)
    assert reader.current() == Flags(True, True, True, True, True, True)
    source.fail = RuntimeError("boom")
    clock.now += 61
    errors = reads("error")
    state = reader.state()
    assert state.flags == Flags(True, True, True, True, True, True)
    assert state.origin == "last_known"
    assert reads("error") == errors + 1
    assert "flag read failed (RuntimeError: boom); last known values hold" in caplog.text
    calls = len(source.calls)
    clock.now += 9
    reader.current()
    assert len(source.calls) == calls  # not hammering a failing API
    source.fail = None
    source.values["citebot_enabled"] = "false"
    clock.now += 1
    assert reader.current().enabled is False
    assert reader.state().origin == "discourse"


def test_an_unusable_value_keeps_that_flags_last_value() -> None:
    clock, source = Clock(), Source(ALL_ON)
    reader = FlagReader(source, flags_settings(), clock=clock)
    reader.current()
    source.values["citebot_rerank"] = "perhaps"
    source.values["citebot_enabled"] = "false"
    clock.now += 60
    partial = reads("partial")
    flags = reader.current()
    assert flags.rerank is True
    assert flags.enabled is False
    assert reads("partial") == partial + 1


def test_a_missing_setting_is_off(caplog: pytest.LogCaptureFixture) -> None:
    source = Source({"citebot_enabled": True})
    flags = FlagReader(source, flags_settings(), clock=Clock()).current()
    assert flags == Flags(enabled=True)
    assert "is the citebot plugin installed?" in caplog.text


def test_overrides_win_over_discourse_defaults_and_failures() -> None:
    settings = flags_settings(override_rerank=False, override_input_gate=True)
    clock, source = Clock(), Source(ALL_ON)
    source.fail = ServiceUnavailableError("down")
    reader = FlagReader(source, settings, clock=clock)
    before = reader.state()
    assert before.flags == Flags(input_gate=True)
    assert before.overridden == ("input_gate", "rerank")
    source.fail = None
    clock.now += 60
    assert reader.current() == Flags(
        enabled=True, posts_pipeline=True, input_gate=True, rerank=False, post_links=True, intent_layer=True
    )
    assert REGISTRY.get_sample_value("citebot_flag_value", {"flag": "rerank"}) == 0.0


def test_refresh_ignores_the_cache() -> None:
    clock, source = Clock(), Source(ALL_ON)
    reader = FlagReader(source, flags_settings(), clock=clock)
    reader.current()
    source.values["citebot_post_links"] = False
    assert reader.refresh().flags.post_links is False
    assert len(source.calls) == 2


def test_one_read_for_many_threads_and_the_first_read_is_waited_for() -> None:
    source = Source(ALL_ON)
    slow_calls: list[float] = []

    def slow(names: Sequence[str]) -> Mapping[str, object]:
        slow_calls.append(time.monotonic())
        time.sleep(0.05)
        return source(names)

    reader = FlagReader(slow, flags_settings())
    results: list[Flags] = []
    start = threading.Barrier(8)

    def job() -> None:
        start.wait()
        results.append(reader.current())

    threads = [threading.Thread(target=job) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(slow_calls) == 1
    assert results == [Flags(True, True, True, True, True, True)] * 8


def test_an_expired_cache_does_not_block_other_threads() -> None:
    clock, source = Clock(), Source(ALL_ON)
    entered, release = threading.Event(), threading.Event()
    hang = False

    def read(names: Sequence[str]) -> Mapping[str, object]:
        if hang:  # the refresh in flight below hangs until released
            entered.set()
            release.wait(5)
            return {}
        return source(names)

    reader = FlagReader(read, flags_settings(), clock=clock)
    reader.current()
    hang = True
    clock.now += 60
    refresher = threading.Thread(target=reader.current)
    refresher.start()
    assert entered.wait(5)
    assert reader.current() == Flags(
        True, True, True, True, True, True
    )  # answered at once with the cached values
    release.set()
    refresher.join()
    assert reader.current() == Flags()


# -- the command -------------------------------------------------------------------------------------


# The types the plugin's settings.yml gives its non-boolean settings, as the admin API reports them.
_TYPES = {
    "citebot_allowed_groups": "group_list",
    "citebot_min_trust_level": "enum",
    "citebot_refusal_notice": "enum",
}


def site_settings_json(values: Mapping[str, object]) -> dict[str, object]:
    """``GET /admin/site_settings.json?plugin=citebot`` as Discourse answers it."""
    return {
        "site_settings": [
            {
                "setting": name,
                "description": "…",
                "default": "false",
                "type": _TYPES.get(name, "bool"),
                "value": value,
                "category": "plugins",
                "preview": None,
                "secret": False,
                "plugin": "citebot",
            }
            for name, value in values.items()
        ]
    }


def forum_over(handler: Callable[[httpx.Request], httpx.Response]) -> DiscourseClient:
    settings = DiscourseSettings.model_validate(
        {"base_url": "http://forum.test", "api_key": SecretStr("k" * 20)}
    )
    return DiscourseClient(httpx.Client(transport=httpx.MockTransport(handler)), settings)


def test_show_prints_discourse_override_and_effective_values() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/admin/site_settings.json"
        values = dict.fromkeys(SETTING_NAMES, "false")
        values["citebot_enabled"] = "true"
        values["citebot_rerank"] = "true"
        del values["citebot_post_links"]
        return httpx.Response(200, json=site_settings_json(values))

    out = io.StringIO()
    code = show_flags(forum_over(handler), flags_settings(override_rerank=False), out=out)
    assert code == 0
    assert out.getvalue().splitlines() == [
        "flag                     discourse  override  effective",
        "citebot_enabled          on         -         on",
        "citebot_posts_pipeline   off        -         off",
        "citebot_input_gate       off        -         off",
        "citebot_rerank           on         off       off",
        "citebot_post_links       -          -         off",
        "citebot_intent_layer     off        -         off",
        "citebot_allowed_groups   (any)",
        "citebot_min_trust_level  1",
        "citebot_refusal_notice   none",
        "warning: citebot_post_links is not declared (is the citebot plugin installed?)",
    ]


def test_show_json() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=site_settings_json(dict.fromkeys(SETTING_NAMES, "true")))

    out = io.StringIO()
    show_flags(forum_over(handler), flags_settings(), as_json=True, out=out)
    data = json.loads(out.getvalue())
    assert data["citebot_post_links"] == {"discourse": True, "override": None, "effective": True}
    assert data["citebot_min_trust_level"] == {"effective": 1}
    assert len(data) == 9


def test_set_puts_the_site_setting_and_notes_a_conflicting_override() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    out = io.StringIO()
    code = set_flag(
        forum_over(handler), flags_settings(override_rerank=False), "citebot_rerank", True, out=out
    )
    assert code == 0
    assert seen[0].method == "PUT"
    assert seen[0].url.path == "/admin/site_settings/citebot_rerank.json"
    assert json.loads(seen[0].content) == {"citebot_rerank": "true"}
    assert out.getvalue().splitlines() == [
        "citebot_rerank set to on in Discourse; workers follow within 60 s",
        "note: CITEBOT_FLAGS__OVERRIDE_RERANK pins it to off where that variable is set",
    ]


def test_cli_refuses_an_unknown_flag_or_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["flags", "set", "turbo", "on"])
    assert info.value.code == 2
    assert "unknown flag 'turbo'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["flags", "set", "rerank", "maybe"])
    assert "expected on or off, got 'maybe'" in capsys.readouterr().err


def test_cli_show_with_the_forum_down_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CITEBOT_DISCOURSE__BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("CITEBOT_DISCOURSE__TIMEOUT_S", "2")
    assert main(["flags", "show"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("citebot: error: discourse")
    assert "Traceback" not in err


# -- summon rules (who may summon the bot), read with the flags ----------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("11|14", ("11", "14")),  # a group_list as Discourse stores it: group ids joined by "|"
        ("Moderators, trust_level_2", ("moderators", "trust_level_2")),
        ("3|3|", ("3",)),
        (["staff", 12], ("staff", "12")),
    ],
)
def test_parse_group_list(value: object, expected: tuple[str, ...]) -> None:
    assert parse_group_list(value) == expected


@pytest.mark.parametrize("value", [None, 3, True])
def test_parse_group_list_refuses_the_rest(value: object) -> None:
    with pytest.raises(ValueError, match="not a group list"):
        parse_group_list(value)


def test_parse_trust_level_and_notice() -> None:
    assert parse_trust_level("2") == 2
    assert parse_trust_level(0) == 0
    for bad in ("5", "-1", "two", True, None):
        with pytest.raises(ValueError, match="not a trust level"):
            parse_trust_level(bad)
    assert parse_notice(" Short ") == "short"
    with pytest.raises(ValueError, match="not a refusal notice"):
        parse_notice("loud")


def test_summon_rules_come_from_the_same_read_as_the_flags() -> None:
    source = Source(
        {
            **ALL_ON,
            "citebot_allowed_groups": "11|support",
            "citebot_min_trust_level": "2",
            "citebot_refusal_notice": "short",
        }
    )
    state = FlagReader(source, flags_settings(), clock=Clock()).state()
    assert state.summon == SummonRules(("11", "support"), 2, "short")
    assert len(source.calls) == 1


def test_summon_rules_default_to_the_cautious_ones_when_missing_or_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, source = Clock(), Source(ALL_ON)  # an older plugin: no summon settings declared
    reader = FlagReader(source, flags_settings(), clock=clock)
    assert reader.state().summon == SummonRules((), 1, "none")
    assert "summon settings not found" in caplog.text
    failing = Source(ALL_ON)
    failing.fail = ServiceUnavailableError("down")
    assert FlagReader(failing, flags_settings(), clock=clock).state().summon == SummonRules()


def test_an_unusable_summon_value_keeps_its_last_value() -> None:
    clock = Clock()
    source = Source({**ALL_ON, "citebot_min_trust_level": "3", "citebot_refusal_notice": "short"})
    reader = FlagReader(source, flags_settings(), clock=clock)
    assert reader.state().summon.min_trust_level == 3
    source.values["citebot_min_trust_level"] = "9"
    source.values["citebot_refusal_notice"] = "none"
    clock.now += 60
    partial = reads("partial")
    summon = reader.state().summon
    assert summon.min_trust_level == 3
    assert summon.refusal_notice == "none"
    assert reads("partial") == partial + 1


def test_summon_overrides_win_like_the_flags() -> None:
    settings = flags_settings(
        override_allowed_groups="Staff,trust_level_3",
        override_min_trust_level=0,
        override_refusal_notice="short",
    )
    source = Source({**ALL_ON, "citebot_allowed_groups": "", "citebot_min_trust_level": "2"})
    state = FlagReader(source, settings, clock=Clock()).state()
    assert state.summon == SummonRules(("staff", "trust_level_3"), 0, "short")
    assert state.overridden == ("allowed_groups", "min_trust_level", "refusal_notice")


def test_show_prints_the_summon_rules_in_effect() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        values: dict[str, object] = dict.fromkeys(SETTING_NAMES, "true")
        values.update(citebot_allowed_groups="11|support", citebot_min_trust_level="1")
        return httpx.Response(200, json=site_settings_json(values))

    out = io.StringIO()
    show_flags(forum_over(handler), flags_settings(override_min_trust_level=3), out=out)
    lines = out.getvalue().splitlines()
    assert "citebot_allowed_groups   11,support" in lines
    assert "citebot_min_trust_level  3" in lines  # the override wins, as in the workers
