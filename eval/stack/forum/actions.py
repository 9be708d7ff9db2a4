"""The moderation the local forum performs, with the events Discourse sends for each (the routes are in
``moderation.py``, the test controls in ``controls.py``).

- ``update_status``: ``Topic#update_status`` → ``TopicStatusUpdater`` (a small-action post by the actor when
  the status changed, e.g. ``closed.enabled``; ``post_created`` for it) and, changed or not,
  ``DiscourseEvent :topic_status_updated`` → ``topic_<status>_status_updated`` with the topic.
- ``hide_post``: a flag's ``ReviewableFlaggedPost.needs_review!`` (``reviewable_created``), ``add_score``
  (``reviewable_score_updated``) and ``Post#hide!``: no ``post_edited``; when no visible regular post is
  left the topic is unlisted by the system user (``topic_visible_status_updated``).
- ``unhide_post``: ``Post#unhide!``: no ``post_edited``; the first post of a topic unlisted by flags
  relists it (``update_status("visible", true)``).
- ``move_posts``: ``PostMover``: moved posts change topic in place, no post event; a moved first post is
  copied by ``PostCreator`` (``post_created`` for the copy, the original stays); a new destination topic is
  made by ``Topic.create!`` (no ``topic_created``); a ``split_topic`` post (a whisper when moving to a PM)
  goes where the posts were (``post_created``); moving every post closes the original topic.
- ``anonymize``: ``UserAnonymizer`` / ``UsernameChanger``: a new ``anon…`` username on the user, their
  posts, and the quotes and mentions of them; no webhook.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from eval.stack.forum.guardian import PRIVATE_MESSAGE, REGULAR, SMALL_ACTION, WHISPER, User
from eval.stack.forum.store import Row
from eval.stack.forum.text import cook, html_to_text, slugify

if TYPE_CHECKING:
    from eval.stack.forum.app import ForumApp

# Topic.visibility_reasons (app/models/topic.rb), the two the double sets.
OP_FLAG_THRESHOLD_REACHED, MANUALLY_UNLISTED, MANUALLY_RELISTED = 0, 3, 4
# Post.hidden_reasons (app/models/post.rb)
FLAG_THRESHOLD_REACHED, FLAG_THRESHOLD_REACHED_AGAIN = 1, 2
# Reviewable statuses (app/models/reviewable.rb)
PENDING, APPROVED, REJECTED = 0, 1, 2
STATUSES = ("closed", "archived", "visible")


@dataclass
class Events:
    """Webhooks to send once the transaction has committed, in Discourse's order."""

    items: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, event, id)

    def post(self, event: str, post_id: int) -> None:
        self.items.append(("post", event, post_id))

    def topic(self, event: str, topic_id: int) -> None:
        self.items.append(("topic", event, topic_id))

    def reviewable(self, event: str, reviewable_id: int) -> None:
        self.items.append(("reviewable", event, reviewable_id))

    def send(self, forum: ForumApp) -> None:
        for kind, event, obj_id in self.items:
            if kind == "post":
                forum.emit_post(event, obj_id)
            elif kind == "topic":
                forum.emit_topic(event, obj_id)
            else:
                forum.emit_reviewable(event, obj_id)


def add_moderator_post(
    forum: ForumApp, conn: psycopg.Connection[Row], topic_id: int, actor: User, action_code: str,
    events: Events, *, raw: str = "", post_type: int = SMALL_ACTION, post_number: int | None = None,
) -> int:  # fmt: skip
    """``Topic#add_moderator_post`` through ``PostCreator`` (so ``post_created``), at ``post_number`` when
    given (``PostMover`` puts its notice where the moved posts were)."""
    cooked = cook(raw) if raw else ""
    post_id = forum.store.insert_post(
        conn,
        actor,
        topic_id,
        raw,
        cooked,
        html_to_text(cooked),
        None,
        post_type=post_type,
        action_code=action_code,
    )
    if post_number is not None:
        conn.execute("UPDATE forum.posts SET post_number = %s WHERE id = %s", (post_number, post_id))
    if not raw:  # nothing to find: a small action is no search hit of its topic's title
        conn.execute("UPDATE forum.posts SET search_data = NULL WHERE id = %s", (post_id,))
    events.post("post_created", post_id)
    return post_id


def update_status(
    forum: ForumApp, conn: psycopg.Connection[Row], topic_id: int, status: str, enabled: bool, actor: User,
    events: Events, *, visibility_reason: int | None = None,
) -> bool:  # fmt: skip
    """``Topic#update_status``; True when the status changed."""
    if status not in STATUSES:
        raise ValueError(status)
    cur = conn.execute(
        f"UPDATE forum.topics SET {status} = %s WHERE id = %s AND {status} = %s",  # noqa: S608
        (enabled, topic_id, not enabled),
    )
    changed = cur.rowcount == 1
    if status == "visible" and visibility_reason is not None:
        conn.execute(
            "UPDATE forum.topics SET visibility_reason_id = %s WHERE id = %s", (visibility_reason, topic_id)
        )
    if changed:
        code = f"{status}.{'enabled' if enabled else 'disabled'}"
        add_moderator_post(forum, conn, topic_id, actor, code, events)
    events.topic(f"topic_{status}_status_updated", topic_id)
    return changed


def system_user(forum: ForumApp) -> User:
    return forum.store.ensure_user("system", admin=True)


def hide_post(forum: ForumApp, post_id: int, flagger: User) -> tuple[int, Events]:
    """A flag that reaches the hiding threshold: the reviewable (created or reused), its score, then
    ``Post#hide!``. Returns the reviewable id and the events to send."""
    events = Events()
    system = system_user(forum)
    with forum.store.connection() as conn, conn.transaction():
        post = forum.store.post(post_id, conn)
        if post is None:
            raise LookupError(post_id)
        row = conn.execute(
            "SELECT id FROM forum.reviewables WHERE post_id = %s AND status = %s", (post_id, PENDING)
        ).fetchone()
        if row is None:
            row = conn.execute(
                "INSERT INTO forum.reviewables (post_id, topic_id, category_id, created_by_id,"
                " target_created_by_id) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (post_id, post["topic_id"], post["category_id"], flagger.id, post["user_id"]),
            ).fetchone()
            events.reviewable("reviewable_created", int(_one(row)["id"]))
        reviewable_id = int(_one(row)["id"])
        conn.execute(
            "UPDATE forum.reviewables SET score = score + 1, version = version + 1 WHERE id = %s",
            (reviewable_id,),
        )
        events.reviewable("reviewable_score_updated", reviewable_id)
        if not post["hidden"]:
            reason = FLAG_THRESHOLD_REACHED_AGAIN if post["hidden_at"] is not None else FLAG_THRESHOLD_REACHED
            conn.execute(
                "UPDATE forum.posts SET hidden = true, hidden_at = now(), hidden_reason_id = %s"
                " WHERE id = %s",
                (reason, post_id),
            )
            visible_left = conn.execute(
                "SELECT 1 FROM forum.posts WHERE topic_id = %s AND NOT hidden AND post_type = %s"
                " AND deleted_at IS NULL LIMIT 1",
                (post["topic_id"], REGULAR),
            ).fetchone()
            if visible_left is None:
                update_status(
                    forum, conn, int(post["topic_id"]), "visible", False, system, events,
                    visibility_reason=OP_FLAG_THRESHOLD_REACHED,
                )  # fmt: skip
    return reviewable_id, events


def unhide_post(forum: ForumApp, conn: psycopg.Connection[Row], post: Row, events: Events) -> None:
    """``Post#unhide!``."""
    conn.execute("UPDATE forum.posts SET hidden = false WHERE id = %s", (post["id"],))
    if post["post_number"] == 1:
        topic = forum.store.topic(int(post["topic_id"]), conn)
        if topic is not None and topic["visibility_reason_id"] in (None, OP_FLAG_THRESHOLD_REACHED):
            update_status(
                forum, conn, int(post["topic_id"]), "visible", True, system_user(forum), events,
                visibility_reason=MANUALLY_RELISTED,
            )  # fmt: skip


def perform_reviewable(forum: ForumApp, reviewable_id: int, action: str) -> Events:
    """``Reviewable#perform`` for a flagged post: ``agree`` keeps it hidden (approved); ``disagree`` unhides
    it (rejected); then ``transition_to`` → ``reviewable_transitioned_to``."""
    events = Events()
    with forum.store.connection() as conn, conn.transaction():
        row = conn.execute("SELECT * FROM forum.reviewables WHERE id = %s", (reviewable_id,)).fetchone()
        if row is None:
            raise LookupError(reviewable_id)
        status = APPROVED if action == "agree" else REJECTED
        if action == "disagree":
            post = forum.store.post(int(row["post_id"]), conn)
            if post is not None and post["hidden"]:
                unhide_post(forum, conn, post, events)
        conn.execute(
            "UPDATE forum.reviewables SET status = %s, version = version + 1 WHERE id = %s",
            (status, reviewable_id),
        )
        events.reviewable("reviewable_transitioned_to", reviewable_id)
    return events


class MoveError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def move_posts(
    forum: ForumApp, original: Row, actor: User, post_ids: list[int], *, title: str | None,
    destination_topic_id: int | None, category_id: int | None, archetype: str | None,
) -> tuple[Row, Events]:  # fmt: skip
    """``Topic#move_posts`` → ``PostMover#to_new_topic`` / ``#to_topic`` (sequential order)."""
    events = Events()
    to_pm = archetype == PRIVATE_MESSAGE
    guardian = forum.guardian_for(actor)
    with forum.store.connection() as conn, conn.transaction():
        posts = conn.execute(
            "SELECT * FROM forum.posts WHERE topic_id = %s AND id = ANY(%s) AND post_type <> %s AND raw <> ''"
            " AND deleted_at IS NULL ORDER BY created_at, post_number",
            (original["id"], post_ids, SMALL_ACTION),
        ).fetchall()
        if not posts:
            raise MoveError(400, "post_ids")
        if destination_topic_id is not None:
            dest = forum.store.topic(destination_topic_id, conn)
            if dest is None:
                raise MoveError(404, "destination_topic_id")
            pms = [original["archetype"], dest["archetype"]]
            if dest["archetype"] != original["archetype"] and PRIVATE_MESSAGE in pms:
                raise MoveError(400, "destination_topic_id")
        elif title:
            first = posts[0]
            row = conn.execute(
                "INSERT INTO forum.topics (id, title, slug, category_id, archetype, user_id, created_at)"
                " VALUES (nextval('forum.topic_ids'), %s, %s, %s, %s, %s, %s) RETURNING id",
                # Topic#ensure_topic_has_a_category: a regular topic gets Uncategorized.
                (title, slugify(title),
                 None if to_pm else category_id or forum.config.uncategorized_category_id,
                 PRIVATE_MESSAGE if to_pm else "regular", first["user_id"], first["created_at"]),
            ).fetchone()  # fmt: skip
            dest = _one(forum.store.topic(int(_one(row)["id"]), conn))
        else:
            raise MoveError(400, "title")
        if not guardian.can_see_topic(dest):  # PostMover#move_posts_to: ensure_can_see!
            raise MoveError(403, "destination")
        dest_id = int(dest["id"])
        counted = conn.execute(
            "SELECT count(*) AS n FROM forum.posts WHERE topic_id = %s AND deleted_at IS NULL"
            " AND (post_type = %s OR (post_type = %s AND action_code IS DISTINCT FROM 'split_topic'))",
            (original["id"], REGULAR, WHISPER),
        ).fetchone()
        moving_all = counted is not None and int(counted["n"]) == len(posts)
        first_moved: int | None = posts[0]["post_number"]
        if first_moved == 1:  # the first post is copied, not moved: the notice goes where the next one was
            first_moved = posts[1]["post_number"] if len(posts) > 1 else None
        top = conn.execute(
            "SELECT COALESCE(max(post_number), 0) AS n FROM forum.posts WHERE topic_id = %s", (dest_id,)
        ).fetchone()
        base = int(top["n"]) + 1 if top else 1
        number = {int(p["post_number"]): base + i for i, p in enumerate(posts)}
        authors: list[int] = []
        for p in posts:
            new_number = number[int(p["post_number"])]
            if p["post_number"] == 1:
                new_id = _copy_first_post(conn, p, dest_id, new_number)
                events.post("post_created", new_id)
            else:
                conn.execute(
                    "UPDATE forum.posts SET topic_id = %s, post_number = %s, reply_to_post_number = %s"
                    " WHERE id = %s",
                    (dest_id, new_number, number.get(p["reply_to_post_number"] or -1), p["id"]),
                )
            authors.append(int(p["user_id"]))
        if to_pm:
            conn.execute(
                "UPDATE forum.topics"
                " SET allowed_user_ids = ARRAY(SELECT DISTINCT unnest(allowed_user_ids || %s)) WHERE id = %s",
                (authors, dest_id),
            )
        _reindex(conn, dest_id)
        code = "split_topic"
        kind = "existing" if destination_topic_id is not None else "new"
        link = f"[{dest['title']}](/t/{dest['slug']}/{dest_id})"
        message = MOVED_MESSAGES[kind].format(count=len(posts), s="" if len(posts) == 1 else "s", link=link)
        add_moderator_post(
            forum, conn, int(original["id"]), actor, code, events, raw=message,
            post_type=WHISPER if to_pm else SMALL_ACTION, post_number=first_moved,
        )  # fmt: skip
        if moving_all:
            update_status(forum, conn, int(original["id"]), "closed", True, actor, events)
        result = _one(forum.store.topic(dest_id, conn))
    return result, events


# move_posts.new_topic_moderator_post / existing_topic_moderator_post (server.en.yml; close wording).
MOVED_MESSAGES = {
    "new": "{count} post{s} were split to a new topic: {link}",
    "existing": "{count} post{s} were merged into an existing topic: {link}",
}


def _copy_first_post(conn: psycopg.Connection[Row], post: Row, topic_id: int, post_number: int) -> int:
    """``PostMover#create_first_post``: ``PostCreator`` makes a new post with the first post's raw, author
    and date; the version is copied (``PostRevision.copy``)."""
    row = conn.execute(
        "INSERT INTO forum.posts (id, topic_id, post_number, user_id, username, raw, cooked, plain,"
        " post_type, version, created_at, updated_at) SELECT nextval('forum.post_ids'), %s, %s, user_id,"
        " username, raw, cooked, plain, post_type, version, created_at, now() FROM forum.posts WHERE id = %s"
        " RETURNING id",
        (topic_id, post_number, post["id"]),
    ).fetchone()
    return int(_one(row)["id"])


def _one(row: Row | None) -> Row:
    if row is None:  # pragma: no cover - RETURNING / a row just written
        raise RuntimeError("the statement returned no row")
    return row


def _reindex(conn: psycopg.Connection[Row], topic_id: int) -> None:
    conn.execute(
        "UPDATE forum.posts p SET search_data = setweight(to_tsvector('english', t.title), 'A')"
        " || setweight(to_tsvector('english', array_to_string(t.tags, ' ')), 'C')"
        " || setweight(to_tsvector('english', left(p.plain, 100000)), 'D')"
        " FROM forum.topics t WHERE t.id = p.topic_id AND p.topic_id = %s",
        (topic_id,),
    )


def anonymize(forum: ForumApp, target: User) -> str:
    """``UserAnonymizer#make_anonymous``: a free ``anon<8 digits>`` username (``make_anon_username``),
    written by ``UsernameChanger`` on the user, their posts, and quotes and mentions of them."""
    old = target.username
    with forum.store.connection() as conn, conn.transaction():
        while True:
            new = f"anon{random.randint(0, 99_999_999)}"
            taken = conn.execute("SELECT 1 FROM forum.users WHERE lower(username) = %s", (new,)).fetchone()
            if taken is None:
                break
        conn.execute(
            "UPDATE forum.users SET username = %s, anonymized = true WHERE id = %s", (new, target.id)
        )
        conn.execute("UPDATE forum.posts SET username = %s WHERE user_id = %s", (new, target.id))
        quote = re.compile(r'(\[quote=")' + re.escape(old) + r"(,)", re.IGNORECASE)
        mention = re.compile(r"(?<![\w@])@" + re.escape(old) + r"(?![\w.-]*\w)", re.IGNORECASE)
        rows = conn.execute("SELECT id, raw FROM forum.posts WHERE raw ILIKE %s", (f"%{old}%",)).fetchall()
        for row in rows:
            raw = mention.sub("@" + new, quote.sub(r"\g<1>" + new + r"\g<2>", row["raw"]))
            if raw != row["raw"]:
                cooked = cook(raw)
                conn.execute(
                    "UPDATE forum.posts SET raw = %s, cooked = %s, plain = %s WHERE id = %s",
                    (raw, cooked, html_to_text(cooked), row["id"]),
                )
    return new


def parse_permissions(params: dict[str, Any]) -> dict[str, Any] | None:
    """``permissions`` as JSON (``{"staff": 1}``) or form fields (``permissions[staff]=1``); None if
    absent."""
    nested = params.get("permissions")
    if isinstance(nested, dict):
        return nested
    found = {
        k[len("permissions[") : -1]: v
        for k, v in params.items()
        if k.startswith("permissions[") and k.endswith("]")
    }
    return found or None
