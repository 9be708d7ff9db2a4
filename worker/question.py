"""Turning a member's post into the question the pipeline answers.

The question is the post's raw Markdown minus what is not the question: the mention of the bot,
quoted posts (``[quote]…[/quote]`` and ``>`` lines), code is kept (it often *is* the question), and
trailing signature noise ("thanks", "cheers", "merci d'avance", a lone name) is dropped. A post that is
only a mention ("@citebot ?") asks about the topic: its question is the topic's title and first post.
"""

from __future__ import annotations

import re

from worker.addressing import drop_bbcode_blocks, mention_pattern

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
# Enough words to be a question on its own; below this, the topic supplies the context.
MIN_QUESTION_CHARS = 12


def extract_question(raw: str, bot_username: str) -> str:
    """The question in a post's raw text, or ``""`` when the post is only a mention."""
    text = drop_bbcode_blocks(raw, frozenset({"quote"}))
    text = _QUOTE_LINE.sub("", text)
    text = mention_pattern(bot_username).sub(" ", text)
    text = _SIGNOFF.sub("", text)
    text = _SPACES.sub(" ", text)
    text = _BLANKS.sub("\n\n", text).strip(" \n\t,:;-")
    return text if len(text) >= MIN_QUESTION_CHARS else ""


def question_for(raw: str, bot_username: str, topic_title: str, first_post_raw: str | None) -> str:
    """The question to answer: the post's own, or the topic's when the post is only a mention."""
    own = extract_question(raw, bot_username)
    if own:
        return own
    opening = extract_question(first_post_raw or "", bot_username)
    return f"{topic_title}\n\n{opening}".strip()
