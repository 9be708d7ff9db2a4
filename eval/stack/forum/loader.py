"""Load a forum export folder into the ``forum`` schema with COPY (the whole urho3d export in seconds).

Export layout (see /work/shared/data/urho3d/README.md): ``topics/<id>.json`` is what Discourse returns for
``GET /t/{id}.json`` with every page of the post stream merged; ``raw/<id>.md`` is ``GET /raw/{id}``:
each post's raw Markdown headed ``username | YYYY-MM-DD HH:MM:SS UTC | #post_number`` and followed by a
line of 25 dashes. A post without raw text gets its cooked text as raw. Authors get the trust level and
roles their posts show; categories get rows when the forum app starts (``ForumStore.seed_categories``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.stack.forum.serialize import LIKE_ACTION_ID
from eval.stack.forum.store import ForumStore
from eval.stack.forum.text import html_to_text

log = logging.getLogger(__name__)

_RAW_HEADER = re.compile(
    r"^(?P<user>.+?) \| \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \| #(?P<n>\d+)\n\n", re.MULTILINE
)
_SEPARATOR = "\n-------------------------\n"


@dataclass(frozen=True, slots=True)
class LoadReport:
    topics: int
    posts: int
    users: int
    seconds: float


def parse_raw_file(text: str) -> dict[int, str]:
    """post_number → raw Markdown, from a ``/raw/{topic_id}`` dump."""
    out: dict[int, str] = {}
    headers = list(_RAW_HEADER.finditer(text))
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[match.end() : end].rstrip("\n")
        if body.endswith(_SEPARATOR.strip("\n")):
            body = body[: -len(_SEPARATOR.strip("\n"))]
        out[int(match.group("n"))] = body.rstrip("\n")
    return out


def _files(export: Path) -> Iterator[tuple[dict[str, Any], dict[int, str]]]:
    topics_dir = export / "topics"
    raw_dir = export / "raw"
    for path in sorted(topics_dir.glob("*.json")):
        data = json.loads(path.read_bytes())
        raw_path = raw_dir / f"{path.stem}.md"
        raws = parse_raw_file(raw_path.read_text(encoding="utf-8")) if raw_path.exists() else {}
        yield data, raws


def export_label(export: Path, also: Sequence[Path] = ()) -> str:
    """What ``forum.meta.export`` records for a load: the export folders, in load order."""
    return os.pathsep.join(str(p) for p in (export, *also))


def load_export(
    store: ForumStore, export: Path, *, reset: bool = True, also: Sequence[Path] = ()
) -> LoadReport:
    """Replace the forum's content with ``export``, then the topics of each ``also`` export that the
    ones before did not have (the demo serves every export its index holds: a sample and the full
    export it was cut from share their topics); returns counts and the time taken."""
    started = time.perf_counter()
    for folder in (export, *also):
        if not (folder / "topics").is_dir():
            raise FileNotFoundError(f"{folder}/topics not found: not a forum export folder")
    store.init_schema(reset=reset)
    users: dict[int, tuple[str, int, bool, bool]] = {}
    topic_rows: list[tuple[object, ...]] = []
    post_rows: list[tuple[object, ...]] = []
    seen_topics: set[int] = set()
    seen_posts: set[int] = set()
    for topic, raws in (item for folder in (export, *also) for item in _files(folder)):
        if int(topic["id"]) in seen_topics:
            continue
        seen_topics.add(int(topic["id"]))
        tags = [t["name"] if isinstance(t, dict) else str(t) for t in topic.get("tags") or []]
        topic_rows.append(
            (
                topic["id"], topic.get("title") or "", topic.get("slug") or "",
                topic.get("category_id"), topic.get("archetype") or "regular", topic.get("visible", True),
                topic.get("closed", False), topic.get("archived", False), topic.get("deleted_at"),
                tags, topic.get("user_id"), topic.get("created_at"),
            )
        )  # fmt: skip
        for post in (topic.get("post_stream") or {}).get("posts") or []:
            if int(post["id"]) in seen_posts:  # another forum's export reusing an id: the first wins
                continue
            seen_posts.add(int(post["id"]))
            cooked = post.get("cooked") or ""
            plain = html_to_text(cooked)
            raw = raws.get(int(post["post_number"]), plain)
            user_id = int(post.get("user_id") or 0)
            users.setdefault(user_id, _account(post, user_id))
            post_rows.append(
                (
                    post["id"], topic["id"], post["post_number"], user_id, post.get("username") or "",
                    raw, cooked, plain, post.get("post_type") or 1, post.get("reply_to_post_number"),
                    post.get("version") or 1, bool(post.get("hidden")), post.get("deleted_at"),
                    bool(post.get("user_deleted")), bool(post.get("accepted_answer")), like_count(post),
                    post.get("created_at"), post.get("updated_at") or post.get("created_at"),
                )
            )  # fmt: skip
    n_topics, n_posts = len(topic_rows), len(post_rows)
    with store.connection() as conn:
        with conn.cursor().copy(
            "COPY forum.topics (id, title, slug, category_id, archetype, visible, closed, archived,"
            " deleted_at, tags, user_id, created_at) FROM STDIN"
        ) as copy:
            for row in topic_rows:
                copy.write_row(row)
        with conn.cursor().copy(
            "COPY forum.posts (id, topic_id, post_number, user_id, username, raw, cooked, plain,"
            " post_type, reply_to_post_number, version, hidden, deleted_at, user_deleted,"
            " accepted_answer, like_count, created_at, updated_at) FROM STDIN"
        ) as copy:
            for row in post_rows:
                copy.write_row(row)
        with conn.cursor().copy(
            "COPY forum.users (id, username, trust_level, admin, moderator) FROM STDIN"
        ) as users_copy:
            seen: set[str] = set()
            for user_id, (name, level, admin, moderator) in sorted(users.items()):
                if name.lower() in seen:
                    continue
                seen.add(name.lower())
                users_copy.write_row((user_id, name, level, admin, moderator))
        _index(conn)
        conn.execute(
            "INSERT INTO forum.meta (export, topics, posts) VALUES (%s, %s, %s)"
            " ON CONFLICT (singleton) DO UPDATE SET export = EXCLUDED.export, topics = EXCLUDED.topics,"
            " posts = EXCLUDED.posts, loaded_at = now()",
            (export_label(export, also), n_topics, n_posts),
        )
    report = LoadReport(n_topics, n_posts, len(users), time.perf_counter() - started)
    log.info("loaded %d topics, %d posts in %.1fs", report.topics, report.posts, report.seconds)
    return report


def like_count(post: dict[str, Any]) -> int:
    """A post's likes in an export: ``like_count`` where the export has it, else the count of its
    ``actions_summary`` entry of id 2 (``PostActionType.types[:like]``; PostSerializer#actions_summary
    leaves a zero count out)."""
    if isinstance(post.get("like_count"), int):
        return int(post["like_count"])
    for action in post.get("actions_summary") or []:
        if isinstance(action, dict) and action.get("id") == LIKE_ACTION_ID:
            return int(action.get("count") or 0)
    return 0


def _account(post: dict[str, Any], user_id: int) -> tuple[str, int, bool, bool]:
    """(username, trust level, admin, moderator) as the export's posts show their author
    (``PostSerializer``: ``trust_level``, ``admin``, ``moderator``); trust level 1 when absent."""
    level = post.get("trust_level")
    return (
        post.get("username") or f"user{user_id}",
        int(level) if isinstance(level, int) else 1,
        bool(post.get("admin")),
        bool(post.get("moderator")),
    )


def _index(conn: Any) -> None:
    """Search vectors weighted like Discourse (title A, category B, tags C, body D) and sequences."""
    conn.execute("DROP INDEX IF EXISTS forum.posts_search_idx")
    conn.execute(
        "UPDATE forum.posts p SET search_data ="
        " setweight(to_tsvector('english', t.title), 'A')"
        " || setweight(to_tsvector('english', array_to_string(t.tags, ' ')), 'C')"
        " || setweight(to_tsvector('english', left(p.plain, 100000)), 'D')"
        " FROM forum.topics t WHERE t.id = p.topic_id"
    )
    conn.execute("CREATE INDEX posts_search_idx ON forum.posts USING gin (search_data)")
    conn.execute("ANALYZE forum.posts")
    conn.execute("SELECT setval('forum.post_ids', GREATEST((SELECT max(id) FROM forum.posts), 1))")
    conn.execute("SELECT setval('forum.topic_ids', GREATEST((SELECT max(id) FROM forum.topics), 1))")
    conn.execute("SELECT setval('forum.user_ids', GREATEST((SELECT max(id) FROM forum.users), 1))")
