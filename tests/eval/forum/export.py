"""A tiny forum export in Discourse's shapes (``topics/<id>.json`` + ``raw/<id>.md``), built for tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOPICS: list[dict[str, object]] = [
    {
        "id": 10,
        "title": "Shader compile error on Android",
        "category_id": 6,
        "posts": [
            ("alice", "My pixel shader fails to compile on Android devices with an error about precision."),
            ("bob", "Add a precision qualifier at the top of the shader, mediump float fixes it on GLES."),
        ],
    },
    {
        "id": 11,
        "title": "Simple FPS counter",
        "category_id": 7,
        "tags": ["ui"],
        "posts": [
            ("carol", "I added a simple FPS counter to the samples, it shows frames per second."),
            ("alice", "Nice, the debug hud also shows the frame rate."),
            ("bob", "Here is a patch for the counter text element."),
        ],
    },
    {
        "id": 12,
        "title": "Physics jitter with many bodies",
        "category_id": 6,
        "posts": [("dave", "Rigid bodies jitter when there are many of them in the physics world.")],
    },
]


def write_export(folder: Path, topics: list[dict[str, object]] = TOPICS) -> Path:
    """Write ``topics`` as an export folder; post ids are topic_id * 100 + post_number."""
    (folder / "topics").mkdir(parents=True, exist_ok=True)
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    users = {"alice": 2, "bob": 3, "carol": 4, "dave": 5}
    for topic in topics:
        tid = int(topic["id"])  # type: ignore[call-overload]
        posts = []
        raw_parts = []
        # a post is (username, text), or (username, text, fields) whose fields override the defaults
        spec: list[tuple[Any, ...]] = topic["posts"]  # type: ignore[assignment]
        for n, (username, text, *more) in enumerate(spec, start=1):
            fields: dict[str, Any] = more[0] if more else {}
            posts.append(
                {
                    "id": tid * 100 + n,
                    "username": username,
                    "created_at": f"2020-01-0{n}T10:00:00.000Z",
                    "cooked": f"<p>{text}</p>",
                    "post_number": n,
                    "post_type": 1,
                    "updated_at": f"2020-01-0{n}T10:00:00.000Z",
                    "reply_to_post_number": None,
                    "topic_id": tid,
                    "topic_slug": "t",
                    "version": 1,
                    "user_id": users[username],
                    "hidden": False,
                    "deleted_at": None,
                    "user_deleted": False,
                    "accepted_answer": n == 2,
                    **fields,
                }
            )
            raw_parts.append(
                f"{username} | 2020-01-0{n} 10:00:00 UTC | #{n}\n\n{text} (raw)\n\n" + "-" * 25 + "\n"
            )
        data = {
            "post_stream": {"posts": posts, "stream": [p["id"] for p in posts]},
            "id": tid,
            "title": topic["title"],
            "fancy_title": topic["title"],
            "posts_count": len(posts),
            "created_at": "2020-01-01T10:00:00.000Z",
            "visible": True,
            "closed": False,
            "archived": False,
            "archetype": "regular",
            "slug": str(topic["title"]).lower().replace(" ", "-"),
            "category_id": topic["category_id"],
            "tags": topic.get("tags", []),
            "deleted_at": None,
            "user_id": posts[0]["user_id"],
        }
        (folder / "topics" / f"{tid}.json").write_text(json.dumps(data), encoding="utf-8")
        (folder / "raw" / f"{tid}.md").write_text("\n".join(raw_parts), encoding="utf-8")
    return folder
