"""Full-text search like Discourse's ``/search.json``, on PostgreSQL's text search.

Per post a ``tsvector`` weighted title A, category B, tags C, body D (built at load); the query's words
are ANDed (``plainto_tsquery``); a query shorter than the minimum term length is refused; each hit
carries a blurb around the first matching word. One post per topic, as ``Search#aggregate_search``
(lib/search.rb) returns it: ``aggregate_post_sql`` groups the matching posts by topic and keeps
``min(posts.post_number)`` (relevance order), so a topic whose first post matches is returned by its
first post, the question, even when a reply matches better; topics are ordered by ``sort_by_relevance``'s
``MAX(ts_rank_cd × priority)`` (closed × 0.9, archived × 0.85), then ``topics.bumped_at`` (here the
topic's last post). What is searched follows ``Search#posts_query`` (lib/search.rb) for the caller:
posts of the types ``Topic.visible_post_types`` gives them (whispers only to whisperers), never hidden,
of listed (``topics.visible``), undeleted, non-PM topics whose category is public or among the caller's
``secure_category_ids`` (every read-restricted one for an admin).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from eval.stack.forum.guardian import Guardian
from eval.stack.forum.store import ForumStore, Row

MIN_TERM_LENGTH = 3  # Discourse's min_search_term_length default
PAGE_SIZE = 50
BLURB_CHARS = 200
_FILTER = re.compile(r"\S+:\S*")  # advanced filters (in:title, order:latest, …) are not supported
_WORD = re.compile(r"\w+", re.UNICODE)

_SQL = """
WITH q AS (SELECT plainto_tsquery('english', %(q)s) AS query),
matched AS (
    SELECT p.topic_id, p.post_number,
           ts_rank_cd(p.search_data, q.query)
             * CASE WHEN t.closed THEN 0.9 WHEN t.archived THEN 0.85 ELSE 1.0 END AS rank
      FROM forum.posts p JOIN forum.topics t ON t.id = p.topic_id
      LEFT JOIN forum.categories c ON c.id = t.category_id, q
     WHERE p.search_data @@ q.query
       AND p.deleted_at IS NULL AND NOT p.hidden AND p.post_type = ANY(%(types)s)
       AND t.deleted_at IS NULL AND t.visible AND t.archetype <> 'private_message'
       AND (c.id IS NULL OR NOT c.read_restricted OR c.id = ANY(%(secure)s))
),
grouped AS (
    SELECT topic_id, min(post_number) AS post_number, max(rank) AS rank FROM matched GROUP BY topic_id
)
SELECT p.id, p.topic_id, p.post_number, p.username, p.user_id, p.plain, p.created_at, p.like_count,
       g.rank, t.title, t.slug, t.category_id, t.tags, t.archetype, t.visible, t.closed, t.archived,
       t.created_at AS topic_created_at,
       (SELECT count(*) FROM forum.posts c WHERE c.topic_id = t.id AND c.deleted_at IS NULL) AS posts_count,
       (SELECT max(c.created_at) FROM forum.posts c WHERE c.topic_id = t.id AND c.deleted_at IS NULL)
         AS bumped_at,
       EXISTS (SELECT 1 FROM forum.posts c WHERE c.topic_id = t.id AND c.accepted_answer
                  AND c.deleted_at IS NULL) AS has_accepted_answer
  FROM grouped g JOIN forum.posts p ON p.topic_id = g.topic_id AND p.post_number = g.post_number
  JOIN forum.topics t ON t.id = g.topic_id
 ORDER BY g.rank DESC, bumped_at DESC NULLS LAST, g.topic_id DESC
 LIMIT %(limit)s OFFSET %(offset)s
"""


class SearchTermTooShort(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class SearchResult:
    term: str
    rows: list[Row]
    more: bool


def clean_term(q: str) -> str:
    """The searchable part of ``q`` (filters dropped); raises when it is shorter than the minimum."""
    term = " ".join(_FILTER.sub(" ", q).split())
    if len(term) < MIN_TERM_LENGTH:
        raise SearchTermTooShort("Your search term is too short.")
    return term


def search(store: ForumStore, q: str, *, guardian: Guardian, page: int = 1) -> SearchResult:
    """One page of hits for ``guardian``'s user."""
    term = clean_term(q)
    params = {
        "q": term,
        "limit": PAGE_SIZE + 1,
        "offset": (max(page, 1) - 1) * PAGE_SIZE,
        "types": list(guardian.visible_post_types()),
        "secure": sorted(guardian.secure_category_ids()),
    }
    with store.connection() as conn:
        rows = conn.execute(_SQL, params).fetchall()
    return SearchResult(term, rows[:PAGE_SIZE], len(rows) > PAGE_SIZE)


def blurb(plain: str, term: str, length: int = BLURB_CHARS) -> str:
    """About ``length`` characters of ``plain`` around the first query word found (else its start)."""
    text = " ".join(plain.split())
    lowered = text.lower()
    start = -1
    for word in _WORD.findall(term.lower()):
        if len(word) < MIN_TERM_LENGTH:
            continue
        # crude stemming: "shaders" should find "shader", as the tsquery did
        for probe in (word, word[: max(MIN_TERM_LENGTH, len(word) - 2)]):
            start = lowered.find(probe)
            if start >= 0:
                break
        if start >= 0:
            break
    if start < 0 or len(text) <= length:
        return text[:length] + ("..." if len(text) > length else "")
    begin = max(0, start - length // 4)
    piece = text[begin : begin + length]
    return ("..." if begin > 0 else "") + piece + ("..." if begin + length < len(text) else "")


def as_json(result: SearchResult, avatar: Any, guardian: Guardian) -> dict[str, object]:
    """Discourse's ``/search.json`` body for ``result``."""
    from eval.stack.forum.store import as_iso

    posts = []
    topics = []
    for row in result.rows:
        posts.append(
            {
                "id": row["id"],
                "name": "",
                "username": row["username"],
                "avatar_template": avatar(row["username"]),
                "created_at": as_iso(row["created_at"]),
                "like_count": row["like_count"],
                "blurb": blurb(row["plain"], result.term),
                "post_number": row["post_number"],
                "topic_title_headline": row["title"],
                "topic_id": row["topic_id"],
            }
        )
        topics.append(
            {
                "id": row["topic_id"],
                "title": row["title"],
                "fancy_title": row["title"],
                "slug": row["slug"],
                "posts_count": row["posts_count"],
                "reply_count": max(0, int(row["posts_count"]) - 1),
                "created_at": as_iso(row["topic_created_at"]),
                "category_id": row["category_id"],
                "tags": guardian.visible_tags(row["tags"] or []),
                "archetype": row["archetype"],
                "visible": row["visible"],
                "closed": row["closed"],
                "archived": row["archived"],
                # discourse-solved's topic field (search topics are ListableTopicSerializer's)
                "has_accepted_answer": row["has_accepted_answer"],
            }
        )
    return {
        "posts": posts,
        "topics": topics,
        "users": [],
        "categories": [],
        "tags": [],
        "groups": [],
        "grouped_search_result": {
            "more_posts": None,
            "more_users": None,
            "more_categories": None,
            "term": result.term,
            "search_log_id": None,
            "more_full_page_results": result.more or None,
            "can_create_topic": True,
            "error": None,
            "extra": {},
            "post_ids": [p["id"] for p in posts],
            "user_ids": [],
            "category_ids": [],
            "tag_ids": [],
            "group_ids": [],
        },
    }
