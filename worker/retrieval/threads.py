"""Where a post stands in its topic: the evidence that tells a topic's answer from its other posts.

The gold of a question is an accepted answer, but cosine and lexical scores cannot tell an answer from
the question it answers or from the chat around it. A forum's structure can, and ``post_index`` holds
it (``post_number``, ``reply_to_post_number``, ``username``). Over the archive's solved topics
(2,043 replies), an accepted answer is far more often than another reply:

- the topic's first reply (46 % against 11 %);
- a reply to the question itself (``reply_to_post_number`` empty or 1: 78 % against 43 %);
- followed by its topic's asker — the asker replied to it, or wrote the next post (54 % against 31 %);
- and less often the asker's own post (29 % against 47 %).

``PostgresThreadIndex.posts_of`` reads every eligible post of the given topics in one query, with
those facts and the question's cosine, so that the second stage can score a topic's other posts too and
cite the one most likely to be its answer. Nothing here reads an accepted-answer flag: the index has
none, and the development set's gold is exactly those flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pgvector import HalfVector

from worker.db.boundary import database_errors
from worker.domain import Candidate
from worker.retrieval.eligibility import ELIGIBLE
from worker.retrieval.recall import ConnectionSource, row_candidate

# Every post of the topics (the facts are read before the exclusions, so that hiding a post from
# retrieval does not change which post is a topic's first reply); then the eligible, not excluded ones.
THREAD_SQL = f"""
WITH topic AS MATERIALIZED (
    SELECT p.post_id, p.topic_id, p.post_number, p.reply_to_post_number, p.username, p.category_id,
           min(p.post_number) FILTER (WHERE p.post_number > 1) OVER (PARTITION BY p.topic_id)
               AS first_reply,
           lead(p.username) OVER (PARTITION BY p.topic_id ORDER BY p.post_number) AS next_username
    FROM post_index p
    WHERE p.topic_id = ANY(%(topics)s::bigint[])
), asker AS (
    SELECT DISTINCT ON (topic_id) topic_id, username FROM topic WHERE post_number = 1
), asker_replied AS (
    SELECT DISTINCT t.topic_id, t.reply_to_post_number AS post_number
    FROM topic t JOIN asker a USING (topic_id)
    WHERE t.username = a.username AND t.reply_to_post_number IS NOT NULL
)
SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id,
       1 - (p.embedding <=> %(q)s) AS cosine,
       t.post_number = t.first_reply AS first_reply,
       coalesce(p.reply_to_post_number, 1) = 1 AS to_question,
       a.username IS NOT NULL AND p.username = a.username AS by_asker,
       a.username IS NOT NULL AND p.username IS DISTINCT FROM a.username
           AND (t.next_username = a.username OR r.post_number IS NOT NULL) AS asker_followed
FROM topic t
JOIN post_index p USING (post_id)
LEFT JOIN asker a ON a.topic_id = t.topic_id
LEFT JOIN asker_replied r ON r.topic_id = t.topic_id AND r.post_number = t.post_number
WHERE {ELIGIBLE}
  AND p.post_id <> ALL(%(exclude)s::bigint[])
ORDER BY p.topic_id, p.post_number
"""  # noqa: S608 - constants only


@dataclass(frozen=True, slots=True)
class PostFacts:
    """A post's place in its topic (see the module docstring for what each fact is worth)."""

    first_reply: bool = False
    to_question: bool = False
    by_asker: bool = False
    asker_followed: bool = False


@dataclass(frozen=True, slots=True)
class Thread:
    """The eligible posts of some topics (with the question's cosine) and each post's facts."""

    posts: tuple[Candidate, ...]
    facts: Mapping[int, PostFacts]

    def topic_best(self) -> dict[int, float]:
        """Each topic's best cosine among its eligible posts: how well the topic as a whole matches."""
        best: dict[int, float] = {}
        for c in self.posts:
            if c.cosine is not None and c.cosine > best.get(c.topic_id, -2.0):
                best[c.topic_id] = c.cosine
        return best


EMPTY = Thread((), {})


class PostgresThreadIndex:
    """Reads whole topics from ``post_index`` (a connection source: a pool's ``connection``)."""

    def __init__(self, connections: ConnectionSource) -> None:
        self._connections = connections

    def posts_of(
        self, vector: Sequence[float], topic_ids: Sequence[int], exclude_post_ids: Sequence[int] = ()
    ) -> Thread:
        """Every eligible post of ``topic_ids`` but the excluded ones, with its cosine and facts."""
        if not topic_ids:
            return EMPTY
        params = {
            "q": HalfVector(np.asarray(vector, dtype=np.float32)),
            "topics": list(topic_ids),
            "exclude": list(exclude_post_ids),
        }
        with database_errors("post index unavailable"), self._connections() as conn, conn.transaction():
            rows = conn.execute(THREAD_SQL, params).fetchall()
        posts = tuple(row_candidate(r, cosine=float(r[7])) for r in rows)
        facts = {
            int(r[0]): PostFacts(
                first_reply=bool(r[8]),
                to_question=bool(r[9]),
                by_asker=bool(r[10]),
                asker_followed=bool(r[11]),
            )
            for r in rows
        }
        return Thread(posts, facts)
