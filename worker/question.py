"""The question the pipeline answers, built from the conversation the member asked it in.

A member rarely asks a question that stands alone: a new topic's title carries the subject ("Cascaded
shadows for the sun light" + "@citebot how do I set them up?"), a mention inside a thread points at
the thread ("@citebot can you help with this one?"), a reply to the bot follows up on its answer
("That didn't work, any other idea?"). :func:`build_question` is the one place that turns those parts
into a :class:`Question`; the worker (:func:`read_question`, from the forum), ``citebot ask`` and the
eval (:func:`thread_question`, from plain strings) all go through it.

The parts, each cleaned the same way (the mention of the bot, ``[quote]`` blocks and ``>`` lines and
trailing sign-offs removed; code kept, it often *is* the question) and each bounded:

- ``own``: the member's own words in the post (up to ``OWN_CHARS``); the part that weighs most.
- ``title``: the topic's title (a new topic's subject; a reply's context).
- ``quoted``: what the member quoted (``[quote]`` of a post, ``>`` lines), never the bot's own words.
- ``earlier_question``: for a follow-up to the bot, the member's earlier question.
- ``replied_to``: the post the member replied to (not the bot's, not the opening post).
- ``opening``: the topic's opening post, for a reply.
- ``already_cited``: post ids the bot cited in its earlier answer (a follow-up): retrieval leaves them
  out, so the bot neither repeats them nor forgets what it said (the earlier question stays in).

A reply whose own words stand alone (:func:`stands_alone`: they name a subject and point at nothing
said before) is asked as the member wrote it, with only what they quoted or asked the bot earlier: a
question asked in someone else's thread is often about something else.

The asked text is ``title``, ``own``, then the context parts in that order of priority, which share
``CONTEXT_CHARS`` less half the member's own length (a long question of the member's needs less
context; never under ``MIN_CONTEXT_CHARS``). A post that is only a mention ("@citebot ?") asks about
what it points at: the first context part present then gets the member's budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from worker.addressing import drop_bbcode_blocks, mention_pattern
from worker.domain import ForumPost, ForumTopic
from worker.errors import NotFoundError
from worker.html_text import html_to_text
from worker.quotes import markdown_quotes, quote_blocks, raw_quotes
from worker.retrieval.stopwords import STOP_WORDS

Shape = Literal["direct", "new_topic", "reply", "follow_up"]

_QUOTE_LINE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
# Linear by construction: a match starts only where a whitespace run holding a newline begins (or at
# the start), and no two unbounded quantifiers can trade characters (possessive ``*+``).
_SIGNOFF = re.compile(
    r"(?:^|(?<!\s)(?=\s*\n))\s*+(?:thanks?(?: you)?(?: in advance)?|thx|cheers|regards|best(?: regards)?|"
    r"merci(?: d'avance| beaucoup| par avance)?|cordialement|bonne journée|a\+)"
    r"[ \t]*+[!.,]*+[ \t]*+(?:\n\s*+[\w .-]{1,30}+)?\s*+$",
    re.IGNORECASE,
)
_SPACES = re.compile(r"[ \t]+")
_BLANKS = re.compile(r"\n{3,}")
# Enough words to be a question on its own; below this, the conversation supplies it.
MIN_QUESTION_CHARS = 12
OWN_CHARS = 1000
TITLE_CHARS = 200
PART_CHARS = 400
CONTEXT_CHARS = 800
MIN_CONTEXT_CHARS = 300
MIN_PART_CHARS = MIN_QUESTION_CHARS  # a context part shorter than this says nothing: left out
CONTEXT_ORDER = ("quoted", "earlier_question", "replied_to", "opening")
# A reply whose own words name a subject (this many words that are not stop-words) and point at nothing
# earlier stands alone: the thread's title and posts are not added (a question asked in someone else's
# thread is often about something else). Pointing words: the member leans on what was said before.
STANDALONE_WORDS = 3
_POINTING = frozenset(
    {
        "this", "that", "it", "its", "these", "those", "them", "they", "same", "above", "here", "there",
        "other", "another", "else", "still", "also", "again", "idea", "ideas",
        "ça", "cela", "ceci", "celui", "celle", "pareil", "même", "dessus", "ici", "autre", "encore",
        "idée", "toujours",
    }
)  # fmt: skip
_LETTERS = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True, slots=True)
class Question:
    """A question and the parts of the conversation it was built from (each already cleaned and cut)."""

    own: str
    title: str = ""
    replied_to: str = ""
    quoted: str = ""
    opening: str = ""
    earlier_question: str = ""
    already_cited: tuple[int, ...] = ()
    shape: Shape = "direct"

    @property
    def text(self) -> str:
        """The asked question: what the gate screens, retrieval embeds and searches, the LLM reads."""
        parts = [self.title, self.own, *(self.part(name) for name in CONTEXT_ORDER)]
        return "\n\n".join(p for p in parts if p)

    def part(self, name: str) -> str:
        return str(getattr(self, name))

    def trace(self) -> dict[str, object]:
        """What the answers row records: the shape, each part present, the posts left out."""
        names = ("own", "title", *CONTEXT_ORDER)
        return {
            "shape": self.shape,
            "chars": len(self.text),
            "parts": {name: self.part(name) for name in names if self.part(name)},
            "already_cited": list(self.already_cited),
        }


def clean(raw: str, bot_username: str) -> str:
    """Post text without what is not the question: quotes, the bot's mention, sign-offs."""
    text = drop_bbcode_blocks(raw, frozenset({"quote"}))
    text = _QUOTE_LINE.sub("", text)
    text = mention_pattern(bot_username).sub(" ", text)
    text = _SIGNOFF.sub("", text)
    text = _SPACES.sub(" ", text)
    return _BLANKS.sub("\n\n", text).strip(" \n\t,:;-")


def extract_question(raw: str, bot_username: str) -> str:
    """The question in a post's raw text, or ``""`` when the post is only a mention."""
    text = clean(raw, bot_username)
    return text if len(text) >= MIN_QUESTION_CHARS else ""


def stands_alone(own: str) -> bool:
    """Do the member's own words name what they ask about, without pointing back at the thread?"""
    words = _LETTERS.findall(own.lower())
    if _POINTING.intersection(words):
        return False
    return sum(1 for w in words if len(w) >= 3 and w not in STOP_WORDS) >= STANDALONE_WORDS


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word to at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(None, 1)[0] if limit > 0 else ""
    return (cut or text[:limit]).rstrip(" ,;:")


def build_question(
    raw: str,
    bot_username: str,
    *,
    title: str = "",
    replied_to: str = "",
    quoted: Sequence[str] = (),
    opening: str = "",
    earlier_question: str = "",
    already_cited: Sequence[int] = (),
    shape: Shape = "direct",
) -> Question:
    """The question of a post whose raw text is ``raw``, in its conversation (see the module docstring).

    Every part is plain text or raw Markdown; each is cleaned (:func:`clean`) and cut here."""
    own = clip(extract_question(raw, bot_username), OWN_CHARS)
    if shape in ("reply", "follow_up") and stands_alone(own):
        title = replied_to = opening = ""  # the thread's; what the member pointed at stays
    found = {
        "quoted": "\n\n".join(c for c in (clean(q, bot_username) for q in quoted) if c),
        "earlier_question": clean(earlier_question, bot_username),
        "replied_to": clean(replied_to, bot_username),
        "opening": clean(opening, bot_username),
    }
    budget = max(MIN_CONTEXT_CHARS, CONTEXT_CHARS - len(own) // 2) if own else OWN_CHARS + CONTEXT_CHARS
    lead = not own  # only a mention: the first part present is what the member asks about
    seen = {own}
    kept: dict[str, str] = {}
    for name in CONTEXT_ORDER:
        text = found[name]
        if not text or text in seen:
            continue
        cut = clip(text, min(OWN_CHARS if lead else PART_CHARS, budget))
        if len(cut) < MIN_PART_CHARS and not lead:
            continue
        kept[name] = cut
        seen.add(text)
        budget -= len(cut)
        lead = False
    return Question(
        own=own,
        title=clip(" ".join(title.split()), TITLE_CHARS),
        already_cited=tuple(dict.fromkeys(int(p) for p in already_cited)),
        shape=shape,
        **kept,
    )


# -- from plain strings: ``citebot ask`` and the eval ----------------------------------------------------


def thread_question(
    question: str,
    bot_username: str,
    *,
    title: str = "",
    thread: Sequence[str] = (),
    follow_up: bool = False,
    already_cited: Sequence[int] = (),
) -> Question:
    """The question of a post written as ``question`` after the posts of ``thread`` (oldest first) in a
    topic titled ``title``. The first post of the thread is the opening; the last is the post replied
    to. With ``follow_up`` the thread ends with the bot's answer (never read: the bot's own words),
    the member's earlier question just before it (a thread of one post is that question alone); the
    bot cited ``already_cited`` then. No thread and a title: a new topic's first post. Neither: a
    question alone."""
    thread = [t for t in thread if t.strip()]
    if follow_up and thread:
        earlier = len(thread) - 2 if len(thread) > 1 else 0
        return build_question(
            question,
            bot_username,
            title=title,
            earlier_question=thread[earlier],
            opening=thread[0] if earlier > 0 else "",
            already_cited=already_cited,
            shape="follow_up",
        )
    if thread:
        return build_question(
            question,
            bot_username,
            title=title,
            opening=thread[0],
            replied_to=thread[-1] if len(thread) > 1 else "",
            already_cited=already_cited,
            shape="reply",
        )
    shape: Shape = "new_topic" if title.strip() else "direct"
    return build_question(question, bot_username, title=title, already_cited=already_cited, shape=shape)


# -- from the forum: the worker -----------------------------------------------------------------------


class PostReader(Protocol):
    """What reading a conversation needs beyond the topic already loaded (``DiscourseClient``)."""

    def get_post(self, post_id: int) -> ForumPost: ...

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost: ...


@dataclass(frozen=True, slots=True)
class EarlierAnswer:
    """The bot's earlier answer in the topic that a post follows up on (``worker.answers.earlier``):
    the member's question post, the bot's reply, and the post ids it cited."""

    post_id: int
    post_number: int | None
    reply_post_number: int | None
    cited: tuple[int, ...] = ()


def pointed_posts(post: ForumPost) -> tuple[int, ...]:
    """Post numbers of the topic that ``post`` answers: the one it replies to, the ones it quotes."""
    numbers = [post.reply_to_post_number] if post.reply_to_post_number else []
    for quote in raw_quotes(post.raw or ""):
        if quote.post_number and quote.topic_id in (None, post.topic_id):
            numbers.append(quote.post_number)
    return tuple(dict.fromkeys(numbers))


def read_question(
    post: ForumPost,
    topic: ForumTopic,
    forum: PostReader,
    bot_username: str,
    earlier: EarlierAnswer | None = None,
) -> Question:
    """The question of ``post`` in ``topic`` (``/t/{id}.json``: cooked posts, the first 20 only, as
    TopicView serves them without ``include_raw``); a post outside that chunk is read by number
    (``/posts/by_number``, with its raw). A post gone is context left out."""
    bot = bot_username.lower()
    by_number: Mapping[int, ForumPost] = {p.post_number: p for p in topic.posts}
    bot_numbers = {p.post_number for p in topic.posts if p.username.lower() == bot}
    if earlier is not None and earlier.reply_post_number:
        bot_numbers.add(earlier.reply_post_number)

    def text_of(number: int | None) -> str:
        if not number or number == post.post_number:
            return ""
        found = by_number.get(number)
        if found is None:
            try:
                found = forum.get_post_by_number(topic.id, number)
            except NotFoundError:
                return ""
        if found.username.lower() == bot:
            bot_numbers.add(number)
            return ""
        return found.raw if found.raw is not None else html_to_text(found.cooked)

    raw = post.raw if post.raw is not None else html_to_text(post.cooked)
    quoted = [
        q.text
        for q in quote_blocks(raw)
        if (q.username or "").lower() != bot
        and not (q.topic_id in (None, topic.id) and q.post_number in bot_numbers)
    ]
    quoted += markdown_quotes(drop_bbcode_blocks(raw, frozenset({"quote", "code"})))
    title = topic.title or post.topic_title
    if post.post_number == 1:
        return build_question(raw, bot_username, title=title, quoted=quoted, shape="new_topic")
    replied = post.reply_to_post_number if post.reply_to_post_number != 1 else None
    replied_text = text_of(replied)
    opening = text_of(1)
    if earlier is None:
        return build_question(
            raw,
            bot_username,
            title=title,
            quoted=quoted,
            replied_to=replied_text,
            opening=opening,
            shape="reply",
        )
    if earlier.post_number is not None:
        asked = opening if earlier.post_number == 1 else text_of(earlier.post_number)
    else:
        try:
            asked = forum.get_post(earlier.post_id).raw or ""
        except NotFoundError:
            asked = ""
    return build_question(
        raw,
        bot_username,
        title=title,
        quoted=quoted,
        earlier_question=asked,
        replied_to=replied_text,
        opening="" if earlier.post_number == 1 else opening,
        already_cited=earlier.cited,
        shape="follow_up",
    )
