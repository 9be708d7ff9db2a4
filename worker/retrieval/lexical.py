"""The lexical channel: full-text search over citebot's own ``post_index``, in PostgreSQL.

Discourse's ``/search.json`` ANDs its terms and returns one post per topic, so it is a weak channel for
a whole question. This one ORs the question's most distinctive stemmed words over the ``lexical``
column (``to_tsvector('english', …)``: the topic title weighted A, the post's own text B; migration
0004) and scores each matching post BM25-like::

    score(post) = Σ over the question's terms t of idf(t) · ts_rank({0, 0, 1/3, 1}, lexical, t, 1)

``ts_rank`` of one term saturates with its frequency and, with normalisation 1, divides by the log of
the post's length (BM25's two ideas); a title hit weighs three times a body hit; ``idf`` comes from the
document frequencies of the indexed posts (``ts_stat``, cached an hour). The question is cleaned
first: greetings, code blocks, inline code, URLs and log or code lines say little about what is asked
and would drown the words that do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import regex

from worker.db.connect import first_line
from worker.domain import Candidate
from worker.errors import ServiceUnavailableError
from worker.retrieval.keyword import DocFrequencies, PostgresTermStats
from worker.retrieval.recall import ConnectionSource, row_candidate

log = logging.getLogger(__name__)

TITLE_WEIGHT = 1.0  # ts_rank weight of the A label (title); the B label (post text) gets a third
TEXT_WEIGHT = 1.0 / 3.0
MAX_TERMS = 16
MAX_DF_SHARE = 0.3  # a word in more than 30 % of the posts is a stop-word here
MIN_POSTS_FOR_CAP = 100

_FENCED = regex.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", regex.S)
_INLINE_CODE = regex.compile(r"`[^`\n]*`")
_URL = regex.compile(r"\b(?:https?://|www\.)\S+", regex.I)
_GREETING = regex.compile(
    r"^\s*(?:(?:hi|hello|hey|greetings|good\s+(?:morning|afternoon|evening|day)|bonjour|salut|"
    r"thanks?(?:\s+(?:you|in\s+advance))?|merci(?:\s+d'avance)?|regards|cheers)\b"
    r"(?:\s+(?:all|everyone|everybody|guys|folks|there|people|à\s+tous))?[\s,!.:;\-–—]*)+",
    regex.I,
)
_LOG_START = regex.compile(
    r"^\s*(?:at\s+\S+\(|File\s+\"|Traceback|#include|#define|#pragma|\$\s|>\s|\[\s*\d|\d+[:>]\s|"
    r"\d{1,2}:\d{2}(?::\d{2})?|(?:WARNING|ERROR|INFO|DEBUG|FATAL|error|warning|note)\b\s*[:\]]|"
    r"(?:[A-Za-z]:)?[\\/][\w.\-\\/]+)"
)
_SYMBOLS = frozenset("{}[]();<>=*&|\\/#@$%^~+")


def is_code_or_log(line: str) -> bool:
    """A line of code, a path, or a log/compiler message rather than prose."""
    s = line.strip()
    if not s:
        return False
    if _LOG_START.match(s) or s.endswith((";", "{", "}", ");")):
        return True
    if " " not in s and len(s) > 25:
        return True
    symbols = sum(ch in _SYMBOLS for ch in s)
    return len(s) >= 8 and symbols / len(s) > 0.12


def clean_question(text: str) -> str:
    """The prose of a question: no code blocks, inline code, URLs, log lines or opening greetings."""
    text = _FENCED.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    text = _URL.sub(" ", text)
    lines = [ln for ln in text.splitlines() if not is_code_or_log(ln)]
    prose = "\n".join(lines)
    return _GREETING.sub("", prose.strip()).strip()


# The lexical column's document frequencies: the keyword channel's table over stemmed lexemes.
LexemeStats = DocFrequencies


def lexeme_stats(connections: ConnectionSource) -> PostgresTermStats:
    """``ts_stat`` over the ``lexical`` column of the most recent 50,000 posts, cached an hour."""
    return PostgresTermStats(
        connections, vector="lexical", min_length=0, sample=50_000, what="lexeme frequencies"
    )


LEXEMES_SQL = "SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', %s))"

# The terms arrive as (lexeme, idf) arrays; the posts that match any of them are scored once each.
SEARCH_SQL = """
WITH terms AS (
    SELECT t.term, t.idf, quote_literal(t.term)::tsquery AS q
    FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS t(term, idf)
), hits AS MATERIALIZED (
    SELECT p.post_id, p.lexical
    FROM post_index p
    WHERE p.lexical @@ %(any)s::tsquery
      AND p.category_id + 0 = ANY(ARRAY(SELECT category_id FROM citable_categories))
      AND p.post_id <> ALL(%(exclude)s::bigint[])
), scored AS (
    SELECT h.post_id, sum(t.idf * ts_rank(%(weights)s::float4[], h.lexical, t.q, 1)) AS score
    FROM hits h CROSS JOIN terms t
    GROUP BY h.post_id
    ORDER BY score DESC, h.post_id
    LIMIT %(k)s
)
SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id, s.score
FROM scored s JOIN post_index p USING (post_id)
ORDER BY s.score DESC, p.post_id
"""


SCORES_SQL = """
WITH terms AS (
    SELECT t.idf, quote_literal(t.term)::tsquery AS q
    FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS t(term, idf)
)
SELECT p.post_id, sum(t.idf * ts_rank(%(weights)s::float4[], p.lexical, t.q, 1))
FROM post_index p CROSS JOIN terms t
WHERE p.post_id = ANY(%(ids)s::bigint[]) AND p.lexical @@ t.q
GROUP BY p.post_id
"""

WEIGHTS = [0.0, 0.0, TEXT_WEIGHT, TITLE_WEIGHT]  # ts_rank's order: D, C, B, A


@dataclass(frozen=True, slots=True)
class LexicalResult:
    """The ranked hits and the weighted terms that found them (to score other channels' hits alike)."""

    candidates: tuple[Candidate, ...]
    terms: tuple[tuple[str, float], ...]


def tsquery_any(terms: Sequence[str]) -> str:
    """``'a' | 'b' | …`` with each lexeme quoted as a tsquery literal."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


class PostgresLexicalIndex:
    """The lexical channel over ``post_index.lexical`` (a connection source: a pool's ``connection``)."""

    def __init__(
        self,
        connections: ConnectionSource,
        *,
        stats: Callable[[], LexemeStats | None] | None = None,
        max_terms: int = MAX_TERMS,
    ) -> None:
        self._connections = connections
        self._stats = stats if stats is not None else lexeme_stats(connections)
        self._max_terms = max_terms

    def terms(
        self, conn: psycopg.Connection, question: str, stats: LexemeStats | None
    ) -> list[tuple[str, float]]:
        """The question's most distinctive stemmed words with their idf, rarest first."""
        cleaned = clean_question(question) or question
        lexemes = [str(r[0]) for r in conn.execute(LEXEMES_SQL, (cleaned,))]
        if stats is None:
            return [(t, 1.0) for t in sorted(lexemes)][: self._max_terms]
        # A word in most posts is a stop-word of this forum (once there are enough posts to tell).
        cap = MAX_DF_SHARE * stats.total if stats.total >= MIN_POSTS_FOR_CAP else stats.total
        known = [t for t in lexemes if 0 < stats.counts.get(t, 0) <= cap]
        known.sort(key=lambda t: (stats.counts[t], t))
        return [(t, stats.idf(t)) for t in known[: self._max_terms]]

    def search(self, question: str, k: int, exclude_post_ids: Sequence[int] = ()) -> LexicalResult:
        """The ``k`` best-scoring eligible posts, best first (``lexical`` and ``lexical_rank`` set)."""
        stats = self._stats()  # before borrowing the connection: the statistics borrow it too
        try:
            with self._connections() as conn, conn.transaction():
                terms = self.terms(conn, question, stats)
                if not terms:
                    return LexicalResult((), ())
                params = {
                    "terms": [t for t, _ in terms],
                    "idf": [w for _, w in terms],
                    "any": tsquery_any([t for t, _ in terms]),
                    "weights": WEIGHTS,
                    "exclude": list(exclude_post_ids),
                    "k": k,
                }
                rows = conn.execute(SEARCH_SQL, params).fetchall()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise ServiceUnavailableError(
                f"post index unavailable: {first_line(exc)}", service="postgres"
            ) from exc
        return LexicalResult(_candidates(rows), tuple(terms))

    def scores(self, terms: Sequence[tuple[str, float]], post_ids: Sequence[int]) -> dict[int, float]:
        """The lexical score of each of ``post_ids`` for ``terms`` (posts matching none are absent)."""
        if not terms or not post_ids:
            return {}
        params = {
            "terms": [t for t, _ in terms],
            "idf": [w for _, w in terms],
            "weights": WEIGHTS,
            "ids": list(post_ids),
        }
        try:
            with self._connections() as conn, conn.transaction():
                rows = conn.execute(SCORES_SQL, params).fetchall()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise ServiceUnavailableError(
                f"post index unavailable: {first_line(exc)}", service="postgres"
            ) from exc
        return {int(r[0]): float(r[1]) for r in rows}


def _candidates(rows: Sequence[Sequence[Any]]) -> tuple[Candidate, ...]:
    return tuple(
        row_candidate(r, lexical=float(r[7]), lexical_rank=rank) for rank, r in enumerate(rows, start=1)
    )
