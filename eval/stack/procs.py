"""The demo's child processes: each in its own process group, logging to ``.cache/demo/logs/NAME.log``.

Every process the demo starts goes through ``Processes``, which stops them all (SIGTERM to the group,
then SIGKILL) in reverse order, on success, on failure and on Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

CITEBOT = (sys.executable, "-m", "worker.app.cli")


class DemoError(Exception):
    """A step failed; ``log`` names the process log to show, if any."""

    def __init__(self, message: str, log: Path | None = None) -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True, slots=True)
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ('' when there is none)."""
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])


class Processes:
    """Starts long-running children, waits until they answer, and stops every one of them."""

    def __init__(self, log_dir: Path, env: Mapping[str, str]) -> None:
        self.log_dir = log_dir
        self.env = dict(env)
        self.children: list[Child] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str, argv: Sequence[str]) -> Child:
        """Start ``argv`` in a new session (its own process group), output appended to its log."""
        log = self.log_path(name)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def run(
        self, name: str, argv: Sequence[str], *, echo: IO[str] | None = None, timeout_s: float = 600
    ) -> str:
        """Run ``argv`` to completion; its output goes to its log (and to ``echo`` as it comes, progress
        bars included). Returns the output; raises ``DemoError`` on a non-zero exit."""
        log = self.log_path(name)
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        with log.open("wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
            child = Child(name, proc, log)
            self.children.append(child)
            try:
                stream = proc.stdout
                if stream is None:  # pragma: no cover - stdout=PIPE always gives one
                    raise DemoError(f"{name}: no output pipe", log)
                while True:
                    chunk = os.read(stream.fileno(), 4096)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    out.write(chunk)
                    out.flush()
                    if echo is not None:
                        echo.write(chunk.decode("utf-8", errors="replace"))
                        echo.flush()
                    if time.monotonic() > deadline:
                        raise DemoError(f"{name} took longer than {timeout_s:.0f} s", log)
                code = proc.wait(max(1.0, deadline - time.monotonic()))
            finally:
                _stop(proc)
                self.children.remove(child)
        if code != 0:
            raise DemoError(f"{name} exited with code {code}", log)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def wait_http(
        self,
        child: Child,
        url: str,
        *,
        timeout_s: float = 120.0,
        ok: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Poll ``url`` until ``ok``; fail early when the child exits."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as http:
            while True:
                code = child.proc.poll()
                if code is not None:
                    raise DemoError(f"{child.name} exited with code {code} while starting", child.log)
                try:
                    if ok(http.get(url, headers=dict(headers or {}))):
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise DemoError(f"{child.name} did not answer {url} within {timeout_s:.0f} s", child.log)
                time.sleep(0.2)

    def check_alive(self) -> None:
        """Raise ``DemoError`` naming the first child that has exited."""
        for child in self.children:
            code = child.proc.poll()
            if code is not None:
                raise DemoError(f"{child.name} exited with code {code}", child.log)

    def stop_all(self) -> None:
        """Stop every child, newest first."""
        while self.children:
            _stop(self.children.pop().proc)

    def save(self, path: Path) -> None:
        """Record the children's process groups (for ``--stop`` after ``--keep``)."""
        path.write_text(json.dumps({c.name: c.proc.pid for c in self.children}), "utf-8")


def stop_saved(path: Path) -> list[str]:
    """Stop the process groups recorded by ``save``; returns the names it signalled."""
    try:
        pids: dict[str, int] = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    stopped = []
    for name, pid in reversed(list(pids.items())):
        if _signal(pid, signal.SIGTERM):
            stopped.append(name)
    deadline = time.monotonic() + 10
    for pid in pids.values():
        while time.monotonic() < deadline and _signal(pid, 0):
            time.sleep(0.1)
        _signal(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return stopped


def _signal(pid: int, sig: int) -> bool:
    """Signal the process group led by ``pid`` (children started in their own session), else the process
    alone (Redis, started in the demo's group). False when neither exists any more, or when the pid now
    belongs to a process the demo did not start (a recycled pid)."""
    if not _ours(pid):
        return False
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            continue
    return False


def _ours(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"worker.app.cli" in command or b"redis-server" in command


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM to the child's process group, SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
