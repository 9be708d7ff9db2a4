"""The local forum's ASGI app served by uvicorn on a free loopback port, in a daemon thread."""

from __future__ import annotations

import threading
import time

import uvicorn

from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.store import ForumStore
from eval.stack.redis import free_port


class ForumThread:
    """``start()`` returns the forum's base URL once it answers; ``stop()`` shuts it down."""

    def __init__(self, store: ForumStore, *, name: str = "forum") -> None:
        self.port = free_port()
        self.forum: ForumApp = create_forum_app(store, ForumConfig(base_url=f"http://127.0.0.1:{self.port}"))
        config = uvicorn.Config(self.forum.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)

    def start(self, timeout_s: float = 30.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the local forum did not start")
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self.forum.close()
