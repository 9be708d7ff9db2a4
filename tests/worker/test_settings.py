from __future__ import annotations

import subprocess
import sys

import pytest

from worker.errors import ConfigError
from worker.settings import Settings, env_name, load_settings


def test_defaults_are_valid_and_new_behaviour_is_off() -> None:
    s = Settings()
    # unset: the thresholds calibrated for the reranker in use (-4 / 0 for a cross-encoder)
    assert s.retrieval.abstain_below is None
    assert s.retrieval.weak_below is None
    assert s.retrieval.rrf_k == 60
    assert s.flags.override_posts_pipeline is None


def test_nested_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEBOT_RETRIEVAL__RRF_K", "30")
    monkeypatch.setenv("CITEBOT_LLM__API_KEY", "sk-secret-value")
    s = load_settings()
    assert s.retrieval.rrf_k == 30
    assert s.llm.api_key.get_secret_value() == "sk-secret-value"
    assert "sk-secret-value" not in repr(s)


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEBOT_DATABASE__URL", "nope")
    with pytest.raises(ConfigError, match="CITEBOT_DATABASE__URL"):
        load_settings()


def test_zone_thresholds_must_be_ordered() -> None:
    with pytest.raises(ConfigError, match="abstain_below must not be above weak_below"):
        load_settings(retrieval={"abstain_below": 1.0, "weak_below": 0.0})


def test_env_name_skips_list_indexes() -> None:
    assert env_name(("discourse", "base_url")) == "CITEBOT_DISCOURSE__BASE_URL"
    assert env_name(("tags", 0)) == "CITEBOT_TAGS"


def test_cli_bad_setting_is_one_line_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "worker.app.cli", "db", "migrate"],
        env={"CITEBOT_DATABASE__URL": "nope", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "CITEBOT_DATABASE__URL" in lines[0]


@pytest.mark.parametrize("argv", [["--help"], ["db", "migrate", "--help"], ["db", "--help"]])
def test_cli_help(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "worker.app.cli", *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0
    assert "usage: citebot" in proc.stdout
