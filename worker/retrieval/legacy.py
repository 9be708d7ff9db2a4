"""The legacy path's evidence: the reply that answers each topic Discourse's search found.

Discourse's ``/search.json`` returns one post per topic, the topic's first matching post
(``Search#aggregate_post_sql`` keeps ``min(posts.post_number)``), and every post's search data carries
its topic's title, so the hit is usually post #1: another member's question, which answers nothing.
So each hit topic is read as the reader (``DiscourseClient.reader()``: anonymous by default, no API
budget spent; ``GET /t/{id}.json``, the first 20 posts of the stream) and its answer is cited:

1. the accepted solution (discourse-solved's post field ``accepted_answer``), whoever wrote it;
2. else the best-liked reply by a member other than the asker (PostSerializer's ``actions_summary``,
   like = id 2), the earliest among equals.

Never cited: the question itself, the bot's posts, a post addressed to the bot (it mentions or replies
to the bot: another member's question to it, ``worker.addressing``), a whisper or small action, a hidden
or deleted post. A topic without such a reply is left out (an unanswered question is not evidence); with
no topic left the legacy path abstains. The question (#1) and the next best reply travel as the
source's context, so a language model sees what was asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from worker.addressing import BotIdentity, decide
from worker.domain import Candidate, ForumPost, ForumTopic
from worker.errors import AuthError, CitebotError, NotFoundError, TransientError
from worker.html_text import html_to_text
from worker.recheck import TopicReader

log = logging.getLogger(__name__)

# ``worker.addressing.decide`` reasons that rule a post out: a system or bot post, a whisper or small
# action, a hidden or deleted post, a mention of the bot or a reply to it.
NOT_AN_ANSWER = frozenset({"system_user", "self", "post_type", "hidden", "deleted", "mention", "reply"})
# Post-grain context: the question and at most one more reply (the prompt's "Nearby posts").
CONTEXT_REPLIES = 1


@dataclass(frozen=True, slots=True)
class TopicAnswers:
    """What reading one hit topic gave: its answers best first (empty: nothing to cite), or why the
    topic could not be read."""

    topic_id: int
    answers: tuple[ForumPost, ...] = ()
    question: ForumPost | None = None
    error: str | None = None
    transient: bool = False  # the read failed with a TransientError (the question may be retried)


def rank_answers(topic: ForumTopic, bots: Sequence[str]) -> tuple[ForumPost, ...]:
    """The posts of ``topic`` that answer its question, best first (see the module docstring)."""
    names = {b.lower() for b in bots if b}
    by_number = {p.post_number: p for p in topic.posts}
    first = by_number.get(1)
    asker = first.username.lower() if first is not None else None
    identities = [BotIdentity(name) for name in sorted(names)]

    def citable(post: ForumPost) -> bool:
        if post.post_number <= 1 or post.username.lower() in names or not post.cooked.strip():
            return False
        if any(decide(post, bot).reason in NOT_AN_ANSWER for bot in identities):
            return False
        parent = by_number.get(post.reply_to_post_number or 0)
        # a reply that quotes its parent has no reply_to_user (suppress_reply_when_quoting): the parent
        # in the stream settles whether it answers the bot
        return parent is None or parent.username.lower() not in names

    candidates = [p for p in topic.posts if citable(p)]
    accepted = [p for p in candidates if p.accepted_answer]
    others = sorted(
        (p for p in candidates if not p.accepted_answer and p.username.lower() != asker),
        key=lambda p: (-p.like_count, p.post_number),
    )
    return tuple(accepted[:1] + others)


def read_answers(reader: TopicReader, topic_id: int, bots: Sequence[str]) -> TopicAnswers:
    """``topic_id`` read as the reader, and its answers; a topic the reader may not open is empty."""
    try:
        topic = reader.get_topic(topic_id)
    except (NotFoundError, AuthError) as exc:
        return TopicAnswers(topic_id, error=f"not readable: {type(exc).__name__}")
    except TransientError as exc:
        return TopicAnswers(topic_id, error=f"{type(exc).__name__}: {exc}", transient=True)
    except CitebotError as exc:
        return TopicAnswers(topic_id, error=f"{type(exc).__name__}: {exc}")
    if topic.deleted or topic.archetype != "regular" or not topic.visible:
        return TopicAnswers(topic_id, error="not citable (deleted, private or unlisted)")
    question = next((p for p in topic.posts if p.post_number == 1), None)
    return TopicAnswers(topic_id, rank_answers(topic, bots), question)


def answer_candidates(
    hits: Sequence[Candidate],
    read: Callable[[int], TopicAnswers],
    *,
    want: int,
    pool: Executor,
) -> tuple[list[Candidate], dict[int, list[Candidate]], list[TopicAnswers]]:
    """For the first ``2 × want`` hit topics (read concurrently on ``pool``), each topic's best answer
    as a candidate in the hits' order, ``want`` at most, with its context (the question, the next
    reply), and every topic's reading (for the trace)."""
    topics = list(dict.fromkeys(h.topic_id for h in hits))[: 2 * want]
    by_topic = {h.topic_id: h for h in reversed(hits)}  # the first hit of each topic
    readings = list(pool.map(read, topics))
    out: list[Candidate] = []
    context: dict[int, list[Candidate]] = {}
    for reading in readings:
        if not reading.answers or len(out) >= want:
            continue
        hit = by_topic[reading.topic_id]
        best, *more = reading.answers
        answer = _candidate(best, hit, keyword_rank=len(out) + 1)
        out.append(answer)
        around = [reading.question] if reading.question is not None else []
        around += more[:CONTEXT_REPLIES]
        context[answer.post_id] = [_candidate(p, hit) for p in sorted(around, key=lambda p: p.post_number)]
    return out, context, readings


def _candidate(post: ForumPost, hit: Candidate, *, keyword_rank: int | None = None) -> Candidate:
    return Candidate(
        post_id=post.id,
        topic_id=hit.topic_id,
        post_number=post.post_number,
        topic_slug=post.topic_slug or hit.topic_slug,
        topic_title=post.topic_title or hit.topic_title,
        text=html_to_text(post.cooked),
        category_id=hit.category_id,
        keyword_rank=keyword_rank,
    )


__all__ = ["TopicAnswers", "TopicReader", "answer_candidates", "rank_answers", "read_answers"]
