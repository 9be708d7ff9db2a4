"""The forum's public HTML pages, so the links the bot writes can be followed on the local forum.

``/t/<slug>/<topic_id>`` shows a topic and ``/t/<slug>/<topic_id>/<post_number>`` the same page anchored
at one post, as Discourse does; a missing topic or post number is a 404, so a test (or the demo) can
check that every link in a reply resolves. Like Discourse, a wrong slug still finds the topic. The page is
what a visitor (anonymous) may see: a restricted category or a PM is a 404, whispers are left out and a
hidden post's text is withheld.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from eval.stack.forum.reads import stream_posts
from eval.stack.forum.serialize import HIDDEN_COOKED

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp


def page_routes(forum: ForumApp) -> list[Route]:
    async def topic_page(request: Request) -> Response:
        topic_id = int(request.path_params["topic_id"])
        number = request.path_params.get("post_number")
        topic = await run_in_threadpool(forum.store.topic, topic_id)
        guardian = await run_in_threadpool(forum.guardian_for, None)  # a visitor's view
        if topic is None or not guardian.can_see_topic(topic):
            return HTMLResponse("<h1>Page not found</h1>", status_code=404)
        posts = await run_in_threadpool(stream_posts, forum, guardian, topic_id)
        if number is not None and not any(p["post_number"] == int(number) for p in posts):
            return HTMLResponse("<h1>Page not found</h1>", status_code=404)
        body = [f"<h1>{html.escape(str(topic['title']))}</h1>"]
        for post in posts:
            body.append(
                f'<article id="post_{post["post_number"]}"><h2>#{post["post_number"]} '
                f"{html.escape(str(post['username']))}</h2>"
                f"{HIDDEN_COOKED if guardian.cooked_hidden(post) else post['cooked']}</article>"
            )
        return HTMLResponse("<!doctype html><html><body>" + "\n".join(body) + "</body></html>")

    return [
        Route("/t/{slug}/{topic_id:int}", topic_page, methods=["GET"]),
        Route("/t/{slug}/{topic_id:int}/{post_number:int}", topic_page, methods=["GET"]),
    ]
