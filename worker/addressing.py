"""Is a post addressed to the bot? A pure, cheap decision the webhook takes before enqueueing anything.

Addressed: ``@botname`` in ``raw`` outside code (fenced, indented, inline) and quotes (``[quote]`` blocks
and ``>`` lines), case-insensitive, on a username boundary; or a reply to one of the bot's posts; or a
private message when PMs are enabled. Never addressed (loop prevention): system users and bots (user id
≤ 0), the bot itself, non-regular posts (moderator actions, small actions, whispers), hidden or deleted
posts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from worker.domain import ForumPost

Reason = Literal[
    "mention",
    "reply",
    "private_message",
    "system_user",
    "self",
    "post_type",
    "hidden",
    "deleted",
    "not_addressed",
]
ADDRESSED: frozenset[Reason] = frozenset({"mention", "reply", "private_message"})
REGULAR_POST = 1

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_QUOTE_TAG = re.compile(r"\[(/?)quote\b[^\]]*\]", re.IGNORECASE)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is on the forum."""

    username: str
    user_id: int | None = None
    answer_pms: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to enqueue, and why (the reason goes to metrics and DEBUG logs)."""

    reason: Reason

    @property
    def addressed(self) -> bool:
        return self.reason in ADDRESSED


def decide(post: ForumPost, bot: BotIdentity) -> Decision:
    """The addressing decision for one post (checks loop prevention first)."""
    if post.user_id <= 0:
        return Decision("system_user")
    if post.username.lower() == bot.username.lower() or (
        bot.user_id is not None and post.user_id == bot.user_id
    ):
        return Decision("self")
    if post.post_type != REGULAR_POST:
        return Decision("post_type")
    if post.hidden:
        return Decision("hidden")
    if post.deleted:
        return Decision("deleted")
    if post.raw and mentions(post.raw, bot.username):
        return Decision("mention")
    if post.reply_to_username is not None and post.reply_to_username.lower() == bot.username.lower():
        return Decision("reply")
    if bot.answer_pms and post.archetype == "private_message":
        return Decision("private_message")
    return Decision("not_addressed")


def mentions(raw: str, username: str) -> bool:
    """True when ``raw`` mentions ``@username`` outside code and quotes."""
    if "@" not in raw:
        return False
    pattern = _mention_pattern(username)
    return pattern.search(visible_text(raw)) is not None


def visible_text(raw: str) -> str:
    """``raw`` without code blocks, inline code, ``[quote]`` blocks and ``>`` quote lines."""
    text = _drop_quote_blocks(raw)
    lines: list[str] = []
    fence: str | None = None
    previous_blank = True
    in_indented = False
    for line in text.splitlines():
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            continue
        blank = not line.strip()
        indented = line.startswith(("    ", "\t"))
        if indented and (previous_blank or in_indented) and not blank:
            in_indented = True
            previous_blank = False
            continue
        if not blank:
            in_indented = False
        previous_blank = blank
        if line.lstrip().startswith(">"):
            continue
        lines.append(line)
    return _INLINE_CODE.sub(" ", "\n".join(lines))


def _drop_quote_blocks(raw: str) -> str:
    """Remove ``[quote…]…[/quote]`` (nested too); an unclosed quote hides the rest of the post."""
    if "[" not in raw:
        return raw
    out: list[str] = []
    depth = 0
    pos = 0
    for match in _QUOTE_TAG.finditer(raw):
        closing = match.group(1) == "/"
        if depth == 0 and not closing:
            out.append(raw[pos : match.start()])
        if closing:
            if depth > 0:
                depth -= 1
                if depth == 0:
                    pos = match.end()
        else:
            depth += 1
    if depth == 0:
        out.append(raw[pos:])
    return "".join(out)


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _mention_pattern(username: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(username)
    if pattern is None:
        # Discourse usernames hold word characters, '-' and '.': "@citebot." ends a sentence, while
        # "@citebot.x" or "@citebot-2" name someone else; "me@citebot" is an e-mail address.
        pattern = re.compile(r"(?<![\w@])@" + re.escape(username) + r"(?![\w-]|\.\w)", re.IGNORECASE)
        _PATTERNS[username] = pattern
    return pattern
