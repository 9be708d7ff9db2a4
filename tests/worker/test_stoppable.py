"""``citebot backfill`` and ``calibrate`` stop on SIGTERM as on Ctrl-C (``common.stoppable``)."""

from __future__ import annotations

import argparse
import os
import signal

import pytest

from worker.app.commands.common import stoppable
from worker.settings import Settings


def test_sigterm_during_the_run_is_a_keyboard_interrupt_and_the_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    reached: list[str] = []

    def run(settings: Settings, args: argparse.Namespace) -> int:
        reached.append("started")
        os.kill(os.getpid(), signal.SIGTERM)
        reached.append("after the signal")  # never: the signal interrupts the run
        return 0

    with pytest.raises(KeyboardInterrupt):
        stoppable(run, Settings(), argparse.Namespace())
    assert reached == ["started"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_finished_run_returns_its_code() -> None:
    assert stoppable(lambda s, a: 3, Settings(), argparse.Namespace()) == 3
