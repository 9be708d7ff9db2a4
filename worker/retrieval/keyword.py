"""The keyword channel: Discourse full-text search on the question's distinctive words.

Discourse's ``/search.json`` ANDs every term, so a whole question returns nothing. We tokenise it,
drop French and English stop-words and words shorter than Discourse's minimum term length, rank what
is left by rarity over the indexed text (document frequency; rarest first), keep ``max_terms`` and
send them, retrying with fewer — the most common dropped first — when nothing comes back.
Without a frequency table (empty index, database down) longer words are taken as the rarer ones.

Discourse returns one post per topic (its best). Hits become ranked ``Candidate``s whose text is the
search blurb (the pipeline swaps in the indexed post text when it has it). The document frequencies
are also the lexical channel's (``lexical.py``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psycopg
import regex
from psycopg import sql

from worker.domain import Candidate, SearchHit
from worker.protocols import KeywordSearch
from worker.retrieval.recall import ConnectionSource
from worker.retrieval.stopwords import STOP_WORDS

log = logging.getLogger(__name__)

# Discourse's `min_search_term_length` default; shorter terms get a 400 or match nothing.
MIN_TERM_LENGTH = 3
# Words, keeping inner dots and hyphens ("node.js", "utf-8"); apostrophes split ("l'objet" → l, objet).
_TOKEN = regex.compile(r"[\p{L}\p{N}_]+(?:[.\-][\p{L}\p{N}_]+)*")


@dataclass(frozen=True, slots=True)
class DocFrequencies:
    """How many of ``total`` indexed posts contain each word (lower-cased, or a stemmed lexeme)."""

    total: int
    counts: Mapping[str, int]

    def idf(self, word: str) -> float:
        """BM25's inverse document frequency (never negative)."""
        df = self.counts.get(word, 0)
        return math.log(1.0 + (self.total - df + 0.5) / (df + 0.5))


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens in order of appearance."""
    return [t.lower() for t in _TOKEN.findall(text)]


def candidate_terms(question: str, min_length: int = MIN_TERM_LENGTH) -> list[str]:
    """The question's words that could be distinctive: no stop-words, no bare numbers, no repeats."""
    seen: set[str] = set()
    out: list[str] = []
    for tok in tokenize(question):
        if len(tok) < min_length or tok in STOP_WORDS or tok.isdigit() or tok in seen:
            continue
        seen.add(tok)
        out.append(tok)
    return out


def rank_terms(terms: list[str], stats: DocFrequencies | None) -> list[str]:
    """Rarest first. Words the table has never seen come after known ones (an ANDed word that no post
    contains empties the search), longest first; without a table, longest first."""
    position = {t: i for i, t in enumerate(terms)}
    if stats is None:
        return sorted(terms, key=lambda t: (-len(t), position[t]))
    known = [t for t in terms if stats.counts.get(t, 0) > 0]
    unknown = [t for t in terms if stats.counts.get(t, 0) == 0]
    known.sort(key=lambda t: (stats.counts[t], -len(t), position[t]))
    unknown.sort(key=lambda t: (-len(t), position[t]))
    return known + unknown


class TermSelector:
    """Builds the keyword queries of a question, most specific first."""

    def __init__(
        self,
        max_terms: int = 4,
        *,
        stats: Callable[[], DocFrequencies | None] | None = None,
        min_length: int = MIN_TERM_LENGTH,
    ) -> None:
        if max_terms < 1:
            raise ValueError("max_terms must be >= 1")
        self.max_terms = max_terms
        self.min_length = min_length
        self._stats = stats

    def select(self, question: str) -> list[str]:
        """The ``max_terms`` most distinctive words, rarest first."""
        stats = self._stats() if self._stats is not None else None
        return rank_terms(candidate_terms(question, self.min_length), stats)[: self.max_terms]

    def keyword_queries(self, question: str) -> list[str]:
        """Queries from longest to shortest: all selected words, then without the most common, ….

        Each query lists its words in the order the question used them.
        """
        chosen = self.select(question)
        order = {t: i for i, t in enumerate(tokenize(question))}
        queries = []
        for m in range(len(chosen), 0, -1):
            words = sorted(chosen[:m], key=lambda t: order.get(t, 0))
            queries.append(" ".join(words))
        return queries


class PostgresTermStats:
    """Document frequencies by ``ts_stat`` over a ``tsvector`` of the most recent ``sample`` posts of
    ``post_index``, cached ``ttl_s``. The keyword channel counts plain words of ``text``; the lexical
    channel counts the stemmed lexemes of its ``lexical`` column.

    The sample is enough to tell a rare word from a common one, and cheap to recompute (about a second
    for 20,000 posts). A failure leaves the previous table in place (or none: every term then counts the
    same, and term selection ranks by length).
    """

    def __init__(
        self,
        connections: ConnectionSource,
        *,
        vector: str = "to_tsvector('simple', text)",
        min_length: int = MIN_TERM_LENGTH,
        sample: int = 20_000,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
        what: str = "document frequencies",
    ) -> None:
        self._connections = connections
        self._vector = sql.SQL(vector)  # a constant of ours, never user input
        self._min_length = int(min_length)
        self._sample = int(sample)
        self._ttl_s = ttl_s
        self._clock = clock
        self._what = what
        self._lock = threading.Lock()
        self._value: DocFrequencies | None = None
        self._loaded_at: float | None = None

    def __call__(self) -> DocFrequencies | None:
        with self._lock:
            now = self._clock()
            if self._loaded_at is None or now - self._loaded_at >= self._ttl_s:
                self._loaded_at = now
                try:
                    self._value = self._load()
                except psycopg.Error as exc:
                    log.warning("%s unavailable: %s", self._what, type(exc).__name__)
            return self._value

    def _load(self) -> DocFrequencies | None:
        inner = sql.SQL("SELECT {} FROM post_index ORDER BY post_id DESC LIMIT {}").format(
            self._vector, sql.Literal(self._sample)
        )
        with self._connections() as conn, conn.transaction():
            total_row = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM post_index LIMIT %s) s", (self._sample,)
            ).fetchone()
            total = int(total_row[0]) if total_row else 0
            if total == 0:
                return None
            query = "SELECT word, ndoc FROM ts_stat(%s) WHERE length(word) >= %s"
            rows = conn.execute(query, (inner.as_string(conn), self._min_length))
            counts = {str(w): int(n) for w, n in rows}
        return DocFrequencies(total=total, counts=counts)


# -- the search ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeywordResult:
    """The hits, best first, and the queries tried (the last one produced the hits, if any did)."""

    candidates: tuple[Candidate, ...]
    queries: tuple[str, ...]

    @property
    def query(self) -> str | None:
        return self.queries[-1] if self.candidates and self.queries else None


def hits_to_candidates(hits: Sequence[SearchHit]) -> list[Candidate]:
    """Best-first candidates, one per topic (Discourse already groups; a second hit of a topic is dropped)."""
    seen: set[int] = set()
    out: list[Candidate] = []
    for hit in hits:
        if hit.topic_id in seen:
            continue
        seen.add(hit.topic_id)
        out.append(
            Candidate(
                post_id=hit.post_id,
                topic_id=hit.topic_id,
                post_number=hit.post_number,
                topic_slug=hit.topic_slug,
                topic_title=hit.topic_title,
                text=hit.blurb,
                category_id=hit.category_id,
                keyword_rank=len(out) + 1,
            )
        )
    return out


def keyword_search(
    search: KeywordSearch,
    selector: TermSelector,
    question: str,
    *,
    limit: int = 25,
    exclude_post_ids: Sequence[int] = (),
) -> KeywordResult:
    """Run the queries from most to least specific until one returns hits; errors propagate."""
    tried: list[str] = []
    excluded = set(exclude_post_ids)
    for query in selector.keyword_queries(question):
        tried.append(query)
        hits = [h for h in search.search(query, limit=limit) if h.post_id not in excluded]
        if hits:
            return KeywordResult(tuple(hits_to_candidates(hits)[:limit]), tuple(tried))
    return KeywordResult((), tuple(tried))
