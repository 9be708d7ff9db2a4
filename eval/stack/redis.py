"""A real Redis for tests and the demo: the one on 127.0.0.1:6379 when it answers, else our own."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout) as client:
            return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


class RedisServer:
    """A ``redis-server`` child process on a free loopback port, with or without persistence."""

    def __init__(self, work_dir: Path, *, port: int | None = None, appendonly: bool = False) -> None:
        self.work_dir = work_dir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.work_dir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--protected-mode",
            "yes",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if redis_answers(self.url, 0.2):
                log.info("redis-server ready on port %d", self.port)
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode}")
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash would; the queue survives only with ``appendonly``."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
