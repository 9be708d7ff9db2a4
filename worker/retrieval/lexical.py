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

from worker.db.boundary import database_errors
from worker.domain import Candidate
from worker.retrieval.eligibility import ELIGIBLE
from worker.retrieval.keyword import DocFrequencies, PostgresTermStats
from worker.retrieval.recall import ConnectionSource, row_candidate

log = logging.getLogger(__name__)

TITLE_WEIGHT = 1.0  # ts_rank weight of the A label (title); the B label (post text) gets a third
TEXT_WEIGHT = 1.0 / 3.0
MAX_TERMS = 16
MAX_DF_SHARE = 0.3  # a word in more than 30 % of the posts is a stop-word here
MIN_POSTS_FOR_CAP = 100
MAX_POSTINGS = 8000  # posts one search reads at most, beyond its rarest term (``match_terms``)

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

# One statement per search. The posts matching any of the match terms are read once each (their
# tsvector detoasted once: ``|| ''``), then scored by one expression of one ``ts_rank`` per term
# (``score_sql``). Cross-joining hits with terms and summing in a hash aggregate, as before, cost about
# three times as much: every (post, term) pair was a row and fetched the tsvector again.
SEARCH_SQL = f"""
WITH hits AS MATERIALIZED (
    SELECT p.post_id, p.lexical || ''::tsvector AS lexical
    FROM post_index p
    WHERE p.lexical @@ %(any)s::tsquery
      AND {ELIGIBLE}
      AND p.post_id <> ALL(%(exclude)s::bigint[])
), scored AS (
    SELECT h.post_id, {{score}} AS score
    FROM hits h
    ORDER BY score DESC, h.post_id
    LIMIT %(k)s
)
SELECT p.post_id, p.topic_id, p.post_number, p.topic_slug, p.topic_title, p.text, p.category_id, s.score
FROM scored s JOIN post_index p USING (post_id)
ORDER BY s.score DESC, p.post_id
"""  # noqa: S608 - constants only

SCORES_SQL = """
SELECT p.post_id, {score}
FROM post_index p
WHERE p.post_id = ANY(%(ids)s::bigint[]) AND p.lexical @@ %(any)s::tsquery
"""

# The index's size, from the planner's statistics (no scan): the match terms' budget scales with it.
POSTS_SQL = "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'post_index'::regclass"


def score_sql(n_terms: int, column: str = "h") -> str:
    """``Σ idf_j · ts_rank(weights, lexical, term_j, 1)`` over ``n_terms`` terms (parameters ``idf0``,
    ``q0``, …): the statement's text depends only on how many terms there are."""
    if n_terms < 1:
        raise ValueError("at least one term")
    return " + ".join(
        f"%(idf{j})s::float8 * ts_rank(%(weights)s::float4[], {column}.lexical, %(q{j})s::tsquery, 1)"
        for j in range(n_terms)
    )


def search_sql(n_terms: int) -> str:
    return SEARCH_SQL.format(score=score_sql(n_terms, "h"))


def scores_sql(n_terms: int) -> str:
    return SCORES_SQL.format(score=score_sql(n_terms, "p"))


WEIGHTS = [0.0, 0.0, TEXT_WEIGHT, TITLE_WEIGHT]  # ts_rank's order: D, C, B, A


@dataclass(frozen=True, slots=True)
class LexicalResult:
    """The ranked hits and the weighted terms that found them (to score other channels' hits alike)."""

    candidates: tuple[Candidate, ...]
    terms: tuple[tuple[str, float], ...]


def tsquery_any(terms: Sequence[str]) -> str:
    """``'a' | 'b' | …`` with each lexeme quoted as a tsquery literal."""
    return " | ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


def term_params(terms: Sequence[tuple[str, float]]) -> dict[str, object]:
    """Each term's idf and single-lexeme tsquery (``idf0``, ``q0``, …), and ``any``: all of them ORed."""
    params: dict[str, object] = {"weights": WEIGHTS, "any": tsquery_any([t for t, _ in terms])}
    for j, (term, idf) in enumerate(terms):
        params[f"idf{j}"] = idf
        params[f"q{j}"] = tsquery_any([term])
    return params


def search_params(
    terms: Sequence[tuple[str, float]],
    k: int,
    exclude_post_ids: Sequence[int] = (),
    match: Sequence[str] | None = None,
) -> dict[str, object] | None:
    """``search_sql(len(terms))``'s parameters (None without terms: nothing to match); ``match``: the
    terms whose posts are read (default: all), every term still scores them."""
    if not terms:
        return None
    params = term_params(terms)
    if match is not None:
        params["any"] = tsquery_any(match)
    params.update({"exclude": list(exclude_post_ids), "k": k})
    return params


def match_terms(
    terms: Sequence[tuple[str, float]], stats: LexemeStats | None, posts: int, budget: int = MAX_POSTINGS
) -> list[str]:
    """The terms whose posts the search reads: rarest first while their postings (estimated from the
    sample's document frequencies, scaled to ``posts``) stay within ``budget``; at least the rarest.

    The cost of a search is the number of posts it reads and scores, and a common word (in a few percent
    of the posts) brings thousands. On the archive (36k posts) the budget cuts no term for most
    questions; at 425k it keeps the cost flat: a post that matches only common words has a low score
    and rarely made the first ``lexical_k`` (the eval's overlap figures: docs/performance.md)."""
    if stats is None or stats.total <= 0 or not terms:
        return [t for t, _ in terms]
    scale = max(posts, stats.total) / stats.total
    picked: list[str] = []
    used = 0.0
    for term, _ in terms:  # rarest first
        postings = stats.counts.get(term, 0) * scale
        if picked and used + postings > budget:
            break
        picked.append(term)
        used += postings
    return picked


class PostgresLexicalIndex:
    """The lexical channel over ``post_index.lexical`` (a connection source: a pool's ``connection``)."""

    def __init__(
        self,
        connections: ConnectionSource,
        *,
        stats: Callable[[], LexemeStats | None] | None = None,
        max_terms: int = MAX_TERMS,
        budget: int = MAX_POSTINGS,
    ) -> None:
        self._connections = connections
        self._stats = stats if stats is not None else lexeme_stats(connections)
        self._max_terms = max_terms
        self._budget = budget

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
        with database_errors("post index unavailable"), self._connections() as conn, conn.transaction():
            terms = self.terms(conn, question, stats)
            if not terms:
                return LexicalResult((), ())
            row = conn.execute(POSTS_SQL).fetchone()
            match = match_terms(terms, stats, int(row[0]) if row else 0, self._budget)
            params = search_params(terms, k, exclude_post_ids, match)
            rows = conn.execute(search_sql(len(terms)), params).fetchall()
        return LexicalResult(_candidates(rows), tuple(terms))

    def scores(self, terms: Sequence[tuple[str, float]], post_ids: Sequence[int]) -> dict[int, float]:
        """The lexical score of each of ``post_ids`` for ``terms`` (posts matching none are absent)."""
        if not terms or not post_ids:
            return {}
        params = {**term_params(terms), "ids": list(post_ids)}
        with database_errors("post index unavailable"), self._connections() as conn, conn.transaction():
            rows = conn.execute(scores_sql(len(terms)), params).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}


def _candidates(rows: Sequence[Sequence[Any]]) -> tuple[Candidate, ...]:
    return tuple(
        row_candidate(r, lexical=float(r[7]), lexical_rank=rank) for rank, r in enumerate(rows, start=1)
    )
