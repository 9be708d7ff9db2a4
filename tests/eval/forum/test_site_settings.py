"""The forum double, the companion plugin and the worker declare the same flags."""

from __future__ import annotations

from pathlib import Path

import yaml

from eval.stack.forum.site_settings import CITEBOT_SETTINGS, PLUGIN_NAME
from worker.flags import PLUGIN_SETTING_NAMES

PLUGIN = Path(__file__).resolve().parents[3] / "deploy" / "discourse-plugin"


def test_the_double_declares_every_flag_the_worker_reads_under_the_plugins_name() -> None:
    assert [s[0] for s in CITEBOT_SETTINGS] == list(PLUGIN_SETTING_NAMES)
    assert {s[4] for s in CITEBOT_SETTINGS} == {PLUGIN_NAME}


def test_the_plugin_declares_the_same_flags() -> None:
    declared = yaml.safe_load((PLUGIN / "config" / "settings.yml").read_text("utf-8"))["plugins"]
    assert sorted(declared) == sorted(PLUGIN_SETTING_NAMES)
    assert f"# name: {PLUGIN_NAME}" in (PLUGIN / "plugin.rb").read_text("utf-8")
