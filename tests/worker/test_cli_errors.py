"""What a newcomer's common mistakes print (issue 16): one line naming the cause and the next step."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from eval.stack.redis import free_port
from worker.logs import BrokerOutageFilter
from worker.settings import unknown_env_names

CLI = [sys.executable, "-m", "worker.app.cli"]


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("CITEBOT_")}, **extra}


def test_version() -> None:
    proc = subprocess.run([*CLI, "--version"], capture_output=True, text=True, check=False, env=clean_env())
    assert (proc.returncode, proc.stdout.strip()) == (0, f"citebot {version('citebot')}")


@pytest.mark.slow
def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "".join(json.dumps({"text": f"how do I load model {i}?"}) + "\n" for i in range(20_000))
    )
    with questions.open("rb") as stdin:
        proc = subprocess.Popen(
            [*CLI, "gate", "check"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
        )
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["hit"] is False  # `| head -1`
        proc.stdout.close()
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 141
    assert err == b""  # no BrokenPipeError traceback


@pytest.mark.slow
def test_a_misspelt_variable_is_reported_with_the_nearest_setting() -> None:
    proc = subprocess.run(
        [*CLI, "gate", "check"],
        input="",
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(CITEBOT_DATABSE__URL="postgresql://db/citebot", CITEBOT_NO_SUCH_THING="1"),
    )
    assert proc.returncode == 0
    assert (
        "CITEBOT_DATABSE__URL is not a citebot setting (did you mean CITEBOT_DATABASE__URL?)" in proc.stderr
    )
    assert "CITEBOT_NO_SUCH_THING is not a citebot setting; it is ignored" in proc.stderr


def test_known_variables_are_not_reported() -> None:
    env = {"CITEBOT_DATABASE__URL": "x", "CITEBOT_LLM": "{}", "citebot_log_level": "INFO", "HOME": "/"}
    assert unknown_env_names(env) == []


def test_flags_show_names_the_forum_it_could_not_reach() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run(
        [*CLI, "flags", "show"],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(
            CITEBOT_DISCOURSE__BASE_URL=url, CITEBOT_REDIS__URL=f"redis://127.0.0.1:{free_port()}/0"
        ),
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"the forum at {url} does not answer" in proc.stderr
    assert "fix CITEBOT_DISCOURSE__BASE_URL" in proc.stderr


def test_redis_outage_lines_become_one_warning_a_minute() -> None:
    now = [0.0]
    handler = logging.Handler()
    seen: list[logging.LogRecord] = []
    handler.emit = seen.append  # type: ignore[method-assign]
    handler.addFilter(BrokerOutageFilter(clock=lambda: now[0]))
    logger = logging.getLogger("dramatiq.worker.ConsumerThread(questions)")
    logger.addHandler(handler)
    try:
        for second in range(0, 121, 3):  # six consumers, every 3 s, for two minutes
            now[0] = float(second)
            for _ in range(6):
                logger.critical("Consumer encountered a connection error: %s", "Connection refused")
        logger.critical("Consumer encountered an unexpected error.")
    finally:
        logger.removeHandler(handler)
    outage = [r for r in seen if "Redis unreachable" in r.getMessage()]
    assert [r.levelname for r in outage] == ["WARNING"] * 3  # at 0, 60 and 120 s
    assert "Connection refused" in outage[0].getMessage()
    assert "(119 similar lines since the last one)" in outage[1].getMessage()
    assert seen[-1].getMessage() == "Consumer encountered an unexpected error."  # others untouched
