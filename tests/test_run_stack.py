"""``tests.services.run_stack``: a stack command past its timeout is asked to stop before it is killed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import run_stack

TRAPS_SIGTERM = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write("stopped what it started")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


def test_a_command_past_its_timeout_gets_sigterm_first(tmp_path: Path) -> None:
    flag = tmp_path / "stopped"
    with pytest.raises(subprocess.TimeoutExpired):
        run_stack([sys.executable, "-c", TRAPS_SIGTERM, str(flag)], timeout_s=2, grace_s=20)
    assert flag.read_text() == "stopped what it started"


def test_a_command_within_its_timeout_gives_its_output_and_code() -> None:
    done = run_stack([sys.executable, "-c", "print('ok'); raise SystemExit(3)"], timeout_s=60)
    assert (done.returncode, done.stdout) == (3, "ok\n")
