"""``citebot flags show`` and ``citebot flags set NAME on|off``: the site-setting flags, via the admin API."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol, TextIO

import httpx

from worker.app.commands.common import settings_from
from worker.errors import ServiceUnavailableError
from worker.flags import (
    FLAG_NAMES,
    PLUGIN_SETTING_NAMES,
    SETTING_PREFIX,
    SUMMON_NAMES,
    FlagReader,
    flag_name,
    overrides_of,
    parse_flag,
)
from worker.settings import FlagsSettings

NAME = "flags"
HELP = "site-setting flags: show, set NAME on|off"


class SiteSettings(Protocol):
    def get_site_settings(self, names: tuple[str, ...]) -> Mapping[str, object]: ...

    def set_site_setting(self, name: str, value: object) -> None: ...


def register(group: argparse.ArgumentParser) -> None:
    sub = group.add_subparsers(dest="flags_command", metavar="ACTION")
    sub.required = True
    show = sub.add_parser(
        "show",
        help="show each flag's value in Discourse, its environment override and the value in effect",
    )
    show.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    show.set_defaults(handler=_show)
    put = sub.add_parser(
        "set",
        help="set a flag's site setting (workers follow within the flag cache TTL, 60 s by default)",
    )
    put.add_argument(
        "name", type=_name_arg, help=f"one of: {', '.join(FLAG_NAMES)} (citebot_ prefix optional)"
    )
    put.add_argument("value", type=_value_arg, metavar="on|off")
    put.set_defaults(handler=_set)


def _name_arg(text: str) -> str:
    try:
        return flag_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _value_arg(text: str) -> bool:
    try:
        return parse_flag(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}") from None


def _client(args: argparse.Namespace) -> tuple[SiteSettings, FlagsSettings, httpx.Client, str]:
    from worker.budget import shared_budget
    from worker.clients.discourse import DiscourseClient

    settings = settings_from(args)
    http = httpx.Client(timeout=settings.discourse.timeout_s)
    forum = DiscourseClient(http, settings.discourse, budget=shared_budget(settings))
    return forum, settings.flags, http, settings.discourse.base_url


def _show(args: argparse.Namespace) -> int:
    forum, flags_settings, http, url = _client(args)
    with http, _naming_the_forum(url):
        return show_flags(forum, flags_settings, as_json=args.json)


def _set(args: argparse.Namespace) -> int:
    forum, flags_settings, http, url = _client(args)
    with http, _naming_the_forum(url):
        return set_flag(forum, flags_settings, args.name, args.value)


@contextmanager
def _naming_the_forum(url: str) -> Iterator[None]:
    """A forum that does not answer is named with its URL and the variable that sets it."""
    try:
        yield
    except ServiceUnavailableError as exc:
        raise ServiceUnavailableError(
            f"the forum at {url} does not answer ({exc.message}): start it, or fix "
            "CITEBOT_DISCOURSE__BASE_URL",
            service="discourse",
        ) from exc


def _word(value: bool | None) -> str:
    return "-" if value is None else ("on" if value else "off")


def show_flags(
    forum: SiteSettings, settings: FlagsSettings, *, as_json: bool = False, out: TextIO | None = None
) -> int:
    """Print each flag: Discourse's value, the override, the value in effect; then the summon rules in
    effect (as a worker reads them: ``FlagReader``). Returns the exit code."""
    raw = forum.get_site_settings(PLUGIN_SETTING_NAMES)
    overrides = overrides_of(settings)
    rows: list[tuple[str, bool | None, bool | None, bool]] = []
    problems = []
    for name in FLAG_NAMES:
        setting = SETTING_PREFIX + name
        stored: bool | None = None
        if setting in raw:
            try:
                stored = parse_flag(raw[setting])
            except ValueError:
                problems.append(f"{setting} has an unusable value")
        else:
            problems.append(f"{setting} is not declared (is the citebot plugin installed?)")
        override = overrides.get(name)
        effective = override if override is not None else bool(stored)
        rows.append((setting, stored, override, effective))
    summon = FlagReader(lambda names: raw, settings).state().summon.as_dict()
    if as_json:
        data: dict[str, object] = {s: {"discourse": d, "override": o, "effective": e} for s, d, o, e in rows}
        data.update({SETTING_PREFIX + name: {"effective": summon[name]} for name in SUMMON_NAMES})
        print(json.dumps(data, sort_keys=True), file=out)
    else:
        print(f"{'flag':<24} {'discourse':<10} {'override':<9} effective", file=out)
        for setting, stored, override, effective in rows:
            print(f"{setting:<24} {_word(stored):<10} {_word(override):<9} {_word(effective)}", file=out)
        for name in SUMMON_NAMES:
            value = summon[name]
            shown = (",".join(value) or "(any)") if isinstance(value, list) else str(value)
            print(f"{SETTING_PREFIX + name:<24} {shown}", file=out)
        for problem in problems:
            print(f"warning: {problem}", file=out)
    return 0


def set_flag(
    forum: SiteSettings, settings: FlagsSettings, name: str, value: bool, *, out: TextIO | None = None
) -> int:
    """Write one flag's site setting. Returns the exit code."""
    setting = SETTING_PREFIX + flag_name(name)
    forum.set_site_setting(setting, value)
    print(
        f"{setting} set to {_word(value)} in Discourse; workers follow within {settings.cache_ttl_s:g} s",
        file=out,
    )
    override = overrides_of(settings).get(flag_name(name))
    if override is not None and override != value:
        env = f"CITEBOT_FLAGS__OVERRIDE_{flag_name(name).upper()}"
        print(f"note: {env} pins it to {_word(override)} where that variable is set", file=out)
    return 0
