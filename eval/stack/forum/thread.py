"""The local forum's ASGI app served by uvicorn on a free loopback port, in a daemon thread."""

from __future__ import annotations

from eval.stack.forum.app import ForumApp, ForumConfig, create_forum_app
from eval.stack.forum.store import ForumStore
from eval.stack.launcher import AppThread
from eval.stack.redis import free_port

# The in-process forum serves the eval and the benches alone, so Discourse's admin-API limit is lifted
# (as an operator raises DISCOURSE_MAX_ADMIN_API_REQS_PER_MINUTE for a bulk job) and citebot's budget
# follows it: ``LIFTED_BUDGET`` goes into the ``discourse`` settings of whatever talks to it.
LIFTED_API_LIMIT = 100_000
LIFTED_BUDGET = {
    "site_api_limit_per_minute": LIFTED_API_LIMIT,
    "api_requests_per_minute": 90_000,
    "api_burst": 1_000,
}


class ForumThread(AppThread):
    """``start()`` returns the forum's base URL once it answers; ``stop()`` shuts it down."""

    def __init__(self, store: ForumStore, *, name: str = "forum") -> None:
        port = free_port()
        forum_config = ForumConfig(
            base_url=f"http://127.0.0.1:{port}", admin_api_reqs_per_minute=LIFTED_API_LIMIT
        )
        self.forum: ForumApp = create_forum_app(store, forum_config)
        super().__init__(self.forum.app, port=port, name=name)

    def stop(self) -> None:
        super().stop()
        self.forum.close()
