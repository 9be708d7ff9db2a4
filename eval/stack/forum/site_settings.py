"""The site settings the local forum declares, and ``Admin::SiteSettingsController#index``'s filters.

Discourse answers ``GET /admin/site_settings.json`` with every visible setting (about 470 on a current
install) unless ``plugin=<name>`` (the name in the plugin's ``plugin.rb``) or ``categories=<a,b>`` narrows
it; any other parameter, ``filter`` included, is ignored. The forum declares the companion plugin's
flags under plugin ``citebot`` (as ``deploy/discourse-plugin/plugin.rb`` names it), a few core
settings whose behaviour it implements (``suppress_reply_when_quoting``), and stand-ins for the rest of
core so that an unfiltered read is as large as Discourse's.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.flags import SETTING_NAMES, SUMMON_SETTING_NAMES

PLUGIN_NAME = "citebot"
CORE_SETTINGS_COUNT = 470

# (name, type, default, category, plugin, description)
Setting = tuple[str, str, str, str, str | None, str]

# One line per flag of ``worker.flags``; a flag added there and not here fails at import, so the double
# can never 404 on a flag the worker reads (the plugin's settings.yml is held to the same list by a test).
_FLAG_DESCRIPTIONS = {
    "citebot_enabled": "Let citebot answer members who mention it.",
    "citebot_posts_pipeline": "Post-grain retrieval (pgvector + keyword fusion).",
    "citebot_input_gate": "Deterministic intent gate before retrieval.",
    "citebot_rerank": "Cross-encoder rerank and evidence zones.",
    "citebot_post_links": "Cite posts (/t/slug/id/n) instead of topics.",
    "citebot_intent_layer": "After the rules, judge the question's embedding against labelled exemplars.",
}
if set(_FLAG_DESCRIPTIONS) != set(SETTING_NAMES):
    raise RuntimeError(f"forum double: flags {sorted(set(SETTING_NAMES) ^ set(_FLAG_DESCRIPTIONS))} differ")

# The summon rules, typed as the plugin's settings.yml declares them: a ``group_list`` (group ids joined
# by ``|``), an ``enum`` of TrustLevelSetting (the value is the level as text) and an ``enum``.
_SUMMON: dict[str, tuple[str, str, str]] = {
    "citebot_allowed_groups": ("group_list", "", "Only members of these groups may summon citebot."),
    "citebot_min_trust_level": ("enum", "1", "Lowest trust level that may summon citebot."),
    "citebot_refusal_notice": ("enum", "none", "What a member who may not summon citebot sees."),
}
if set(_SUMMON) != set(SUMMON_SETTING_NAMES):
    raise RuntimeError(f"forum double: summon settings {sorted(set(SUMMON_SETTING_NAMES) ^ set(_SUMMON))}")

CITEBOT_SETTINGS: tuple[Setting, ...] = (
    *((name, "bool", "false", "plugins", PLUGIN_NAME, _FLAG_DESCRIPTIONS[name]) for name in SETTING_NAMES),
    *((name, kind, default, "plugins", PLUGIN_NAME, text) for name, (kind, default, text) in _SUMMON.items()),
)

_CORE_NAMED: tuple[Setting, ...] = (
    ("title", "string", "Discourse", "required", None, "The name of this site."),
    ("suppress_reply_when_quoting", "bool", "true", "posting", None,
     "Suppress the in-reply-to expansion when the post quotes its reply."),
    ("min_post_length", "integer", "20", "posting", None, "Minimum allowed post length in characters."),
    ("min_topic_title_length", "integer", "15", "posting", None, "Minimum topic title length."),
    ("approve_unless_allowed_groups", "group_list", "10", "posting", None,
     "Posts by users outside these groups need approval."),
)  # fmt: skip
CATEGORIES = ("required", "basic", "users", "posting", "email", "files", "security", "spam", "search")


def default_settings() -> list[Setting]:
    """Every setting the forum declares: the plugin's, the named core ones, then core stand-ins."""
    fill = CORE_SETTINGS_COUNT - len(_CORE_NAMED)
    stand_ins = [
        (f"core_setting_{i:03d}", "string", "", CATEGORIES[i % len(CATEGORIES)], None, "A core setting.")
        for i in range(fill)
    ]
    return [*CITEBOT_SETTINGS, *_CORE_NAMED, *stand_ins]


def matches(plugin: str | None, category: str, *, want_plugin: str | None, want: Sequence[str]) -> bool:
    """``SiteSetting.all_settings(filter_plugin:, filter_categories:)``: both narrow, neither widens."""
    if want_plugin and plugin != want_plugin:
        return False
    return not want or category in want
