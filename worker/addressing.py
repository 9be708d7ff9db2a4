"""Is a post addressed to the bot? A pure, cheap decision the webhook takes before enqueueing anything.

Addressed when Discourse would notify the bot, or when the post answers it:

- a **mention**, as Discourse decides who is notified (``PostAnalyzer#raw_mentions``): an element of
  class ``mention`` reading ``@botname`` in the cooked HTML, except inside ``pre``, a quote
  (``aside.quote``: a ``[quote]`` of a post; a Markdown ``>`` blockquote is not one and notifies), a
  onebox or an elided block. With the webhook's ``cooked`` the decision reads it
  (:func:`cooked_mentions`); without it (the poller, a body without ``cooked``) :func:`mentions` parses
  ``raw`` with the same exclusions: fenced, indented and inline code, ``[code]`` and ``[quote]``
  blocks, HTML comments, HTML blocks and the text of ``<code>``, ``<pre>`` and links, and
  an escaped ``\\@``. Both are held to one table of cases (``tests/worker/test_addressing.py``);
- a **reply** to one of the bot's posts: ``reply_to_user`` names the bot (:func:`replies_to_bot`), or
  it is absent because the reply quotes its parent (Discourse's ``suppress_reply_when_quoting``, on by
  default: "select text → Quote → reply"), leaving ``reply_to_post_number``: a ``reply_to_post``
  candidate that the worker settles with :func:`confirm_reply_to_bot` (the ``answers`` table knows
  where the bot's replies are; one ``GET /posts/by_number/…`` settles the rest);
- a **private message** when PMs are enabled.

Never addressed (loop prevention): system users and bots (user id ≤ 0), the bot itself, non-regular
posts (moderator actions, small actions, whispers), hidden or deleted posts.

Every scan here is linear in the length of the post (member text is hostile: no pattern may backtrack
over it), and ``tests/test_regex_budget.py`` times each one on worst-case inputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from worker.domain import ForumPost
from worker.errors import NotFoundError

if TYPE_CHECKING:
    import psycopg

Reason = Literal[
    "mention",
    "reply",
    "private_message",
    "reply_to_post",
    "system_user",
    "self",
    "post_type",
    "hidden",
    "deleted",
    "not_addressed",
]
ADDRESSED: frozenset[Reason] = frozenset({"mention", "reply", "private_message"})
REGULAR_POST = 1

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_BBCODE_BLOCK = re.compile(r"\[(/?)(quote|code)\b[^\]\n]*\]", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")
_BLOCKQUOTE_MARKERS = re.compile(r"(?: {0,3}>)+ ?")
# Raw HTML (CommonMark §4.6): a block starts with one of these tags, or is a complete tag alone on its
# line; inline, the text of <code>, <pre> and <a> elements is not parsed for mentions.
_HTML_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "base", "basefont", "blockquote", "body", "caption", "center",
        "col", "colgroup", "dd", "details", "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption",
        "figure", "footer", "form", "frame", "frameset", "h1", "h2", "h3", "h4", "h5", "h6", "head",
        "header", "hr", "html", "iframe", "legend", "li", "link", "main", "menu", "menuitem", "nav",
        "noframes", "ol", "optgroup", "option", "p", "param", "search", "section", "summary", "table",
        "tbody", "td", "tfoot", "th", "thead", "title", "tr", "track", "ul",
    }
)  # fmt: skip
_HTML_RAW_TAGS = ("pre", "script", "style", "textarea")
_HTML_BLOCK_OPEN = re.compile(r" {0,3}</?([A-Za-z][A-Za-z0-9-]*)(?=[\s/>]|$)")
_HTML_LONE_TAG = re.compile(
    r" {0,3}(?:<[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>|</[A-Za-z][A-Za-z0-9-]*\s*>)\s*"
)
_HTML_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)\b([^<>]*)>")
_HTML_HIDING = frozenset({"code", "pre", "a", "script", "style", "textarea"})
_MD_LINK_TEXT = re.compile(r"\[[^\[\]\n]*\]\([^()\s]*\)")
_CLASS_ATTR = re.compile(r"""\bclass\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)
# Cooked HTML that does not notify: Discourse strips these before it reads the mentions.
_COOKED_HIDING_TAGS = frozenset({"pre", "code"})
_COOKED_HIDING_CLASSES = frozenset({"quote", "onebox", "elided"})
_VOID_TAGS = frozenset(
    {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)


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

    @property
    def needs_confirmation(self) -> bool:
        """A reply whose parent's author Discourse did not name: addressed if the parent is the bot's."""
        return self.reason == "reply_to_post"


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
    if mentions_bot(post, bot):
        return Decision("mention")
    if replies_to_bot(post, bot):
        return Decision("reply")
    if bot.answer_pms and post.archetype == "private_message":
        return Decision("private_message")
    if post.reply_to_username is None and post.reply_to_post_number is not None:
        return Decision("reply_to_post")
    return Decision("not_addressed")


def mentions_bot(post: ForumPost, bot: BotIdentity) -> bool:
    """Would Discourse notify the bot of this post? The cooked HTML decides when there is one."""
    if post.cooked:
        return cooked_mentions(post.cooked, bot.username)
    return bool(post.raw) and mentions(post.raw or "", bot.username)


def replies_to_bot(post: ForumPost, bot: BotIdentity) -> bool:
    """Is the post a reply to one of the bot's posts? (Recognised by the replied-to user's name.)"""
    return post.reply_to_username is not None and post.reply_to_username.lower() == bot.username.lower()


class BotPosts(Protocol):
    """What confirming a reply needs from the forum."""

    def get_post_by_number(self, topic_id: int, post_number: int) -> ForumPost: ...


def confirm_reply_to_bot(
    conn: psycopg.Connection[Any], forum: BotPosts, topic_id: int, post_number: int, bot: BotIdentity
) -> bool:
    """Whether post ``post_number`` of ``topic_id`` is the bot's: its recorded replies first, then one
    API call (a bot post the table does not know: a reply from before it kept numbers, a manual post)."""
    from worker import answers  # the webhook process decides without a database

    if answers.is_bot_reply(conn, topic_id, post_number):
        return True
    try:
        parent = forum.get_post_by_number(topic_id, post_number)
    except NotFoundError:
        return False
    return parent.username.lower() == bot.username.lower() or (
        bot.user_id is not None and parent.user_id == bot.user_id
    )


def mentions(raw: str, username: str) -> bool:
    """True when ``raw`` mentions ``@username`` where Discourse would notify (see the module docstring)."""
    if "@" not in raw:
        return False
    text = visible_text(raw)
    for match in mention_pattern(username).finditer(text):
        if _escaped(text, match.start()):
            continue
        return True
    return False


def cooked_mentions(cooked: str, username: str) -> bool:
    """True when the cooked HTML holds a ``.mention`` reading ``@username`` outside code, quotes and
    oneboxes (what Discourse's ``PostAnalyzer#raw_mentions`` reads)."""
    wanted = "@" + username.lower()
    if wanted not in cooked.lower():
        return False
    html = _drop_comments(cooked)
    stack: list[tuple[str, bool, bool]] = []  # (tag, hides mentions, is a mention)
    open_count: dict[str, int] = {}
    hidden = 0
    mention_text: list[str] | None = None
    pos = 0
    for tag in _HTML_TAG.finditer(html):
        if mention_text is not None:
            mention_text.append(html[pos : tag.start()])
        pos = tag.end()
        closing, name = tag.group(1) == "/", tag.group(2).lower()
        if closing:
            if not open_count.get(name):
                continue  # a stray closing tag
            while stack:  # pop to the matching opening tag (amortised: each tag is popped once)
                popped, hides, is_mention = stack.pop()
                open_count[popped] -= 1
                hidden -= hides
                if is_mention and mention_text is not None:
                    if hidden == 0 and _unescape("".join(mention_text)).strip().lower() == wanted:
                        return True
                    mention_text = None
                if popped == name:
                    break
            continue
        if tag.group(3).rstrip().endswith("/") or name in _VOID_TAGS:
            continue
        classes = _classes(tag.group(3))
        hides = name in _COOKED_HIDING_TAGS or not _COOKED_HIDING_CLASSES.isdisjoint(classes)
        is_mention = "mention" in classes and mention_text is None
        if is_mention:
            mention_text = []
        stack.append((name, hides, is_mention))
        open_count[name] = open_count.get(name, 0) + 1
        hidden += hides
    return False


def visible_text(raw: str) -> str:
    """``raw`` without what Discourse does not read for mentions (see the module docstring)."""
    text = drop_bbcode_blocks(_drop_comments(raw))
    lines: list[str] = []
    fence: str | None = None
    html_end: str | None = None  # "" for "ends at a blank line", else the closing tag
    previous_blank = True
    in_indented = False
    for line in text.splitlines():
        # A Markdown blockquote is a plain <blockquote>, not a quote of a post: Discourse notifies
        # mentions in it, so only its markers go (code inside it is still code).
        markers = _BLOCKQUOTE_MARKERS.match(line)
        if markers:
            line = line[markers.end() :]
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
            continue
        blank = not line.strip()
        if html_end is not None:
            if (html_end == "" and blank) or (html_end and html_end in line.lower()):
                html_end = None
            previous_blank = blank
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            continue
        indented = line.startswith(("    ", "\t"))
        if indented and (previous_blank or in_indented) and not blank:
            in_indented = True
            previous_blank = False
            continue
        if not blank:
            in_indented = False
        html_end = _html_block_end(line, previous_blank)
        previous_blank = blank
        if html_end is not None:
            if html_end and html_end in line.lower()[line.lower().find("<") + 1 :]:
                html_end = None
            continue
        lines.append(line)
    return _drop_inline_html(_MD_LINK_TEXT.sub(" ", _drop_code_spans("\n".join(lines))))


def _html_block_end(line: str, after_blank: bool) -> str | None:
    """Where an HTML block that starts at ``line`` ends (``""``: at a blank line), or None."""
    opened = _HTML_BLOCK_OPEN.match(line)
    if opened is None:
        return None
    name = opened.group(1).lower()
    if name in _HTML_RAW_TAGS and not line.lstrip().startswith("</"):
        return f"</{name}>"
    if name in _HTML_BLOCK_TAGS:
        return ""
    # Any other complete tag alone on its line starts a block, but cannot interrupt a paragraph.
    if after_blank and _HTML_LONE_TAG.fullmatch(line):
        return ""
    return None


def _drop_comments(text: str) -> str:
    """Remove closed ``<!-- … -->`` comments (an unclosed one stays text)."""
    if "<!--" not in text:
        return text
    out: list[str] = []
    pos = 0
    while (start := text.find("<!--", pos)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        out.append(text[pos:start])
        out.append(" ")
        pos = end + 3
    out.append(text[pos:])
    return "".join(out)


def drop_bbcode_blocks(raw: str, names: frozenset[str] = frozenset({"quote", "code"})) -> str:
    """Remove ``[quote…]…[/quote]`` and ``[code]…[/code]`` blocks (``names``: which of the two; quotes
    nest; an unclosed tag stays text, as Discourse renders it). One linear pass over the tags."""
    if "[" not in raw:
        return raw
    out: list[str] = []
    pos = 0
    opened: list[tuple[str, int]] = []  # (tag, start) of the open blocks, outermost first
    for match in _BBCODE_BLOCK.finditer(raw):
        closing, name = match.group(1) == "/", match.group(2).lower()
        if name not in names:
            continue
        if opened and opened[-1][0] == "code":
            if closing and name == "code":  # nothing nests inside [code]
                start = opened.pop()[1]
                if not opened:
                    out.append(raw[pos:start])
                    pos = match.end()
            continue
        if not closing:
            opened.append((name, match.start()))
        elif opened and opened[-1][0] == name:
            start = opened.pop()[1]
            if not opened:
                out.append(raw[pos:start])
                pos = match.end()
    out.append(raw[pos:])
    return " ".join(out)


def _drop_code_spans(text: str) -> str:
    """Remove inline code: a run of n backticks up to the next run of exactly n (CommonMark §6.1).

    Linear: each run's closer is found by a right-to-left pass that remembers the next run of each
    length; a run with no closer is literal text.
    """
    if "`" not in text:
        return text
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    closer: list[int | None] = [None] * len(runs)
    next_of_length: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        length = runs[i][1] - runs[i][0]
        closer[i] = next_of_length.get(length)
        next_of_length[length] = i
    out: list[str] = []
    pos = 0
    i = 0
    while i < len(runs):
        j = closer[i]
        if j is None:
            i += 1
            continue
        out.append(text[pos : runs[i][0]])
        out.append(" ")
        pos = runs[j][1]
        i = j + 1
    out.append(text[pos:])
    return "".join(out)


def _drop_inline_html(text: str) -> str:
    """Remove HTML tags, and the text of ``<code>``, ``<pre>`` and links up to their closing tag (an
    element that is never closed hides nothing)."""
    if "<" not in text:
        return text
    lowered = text.lower()
    out: list[str] = []
    pos = 0
    never_closed: set[str] = set()  # once a closing tag is missing after one opening, it is after all
    for tag in _HTML_TAG.finditer(text):
        if tag.start() < pos:
            continue
        out.append(text[pos : tag.start()])
        out.append(" ")
        pos = tag.end()
        name = tag.group(2).lower()
        if tag.group(1) or name not in _HTML_HIDING or name in never_closed:
            continue
        end = lowered.find(f"</{name}", tag.end())
        if end == -1:
            never_closed.add(name)
            continue
        close = lowered.find(">", end)
        pos = close + 1 if close != -1 else len(text)
    out.append(text[pos:])
    return "".join(out)


def _escaped(text: str, at: int) -> bool:
    """Is the character at ``at`` escaped by an odd run of backslashes?"""
    count = 0
    while at - count - 1 >= 0 and text[at - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _classes(attrs: str) -> frozenset[str]:
    found = _CLASS_ATTR.search(attrs)
    if found is None:
        return frozenset()
    return frozenset((found.group(1) or found.group(2) or found.group(3) or "").split())


def _unescape(text: str) -> str:
    return text.replace("&#64;", "@").replace("&commat;", "@")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def mention_pattern(username: str) -> re.Pattern[str]:
    """``@username`` as Discourse reads a mention in raw text, any case (compiled once per name)."""
    pattern = _PATTERNS.get(username)
    if pattern is None:
        # Discourse usernames hold word characters, '-' and '.': "@citebot." ends a sentence, while
        # "@citebot.x" or "@citebot-2" name someone else; "me@citebot" is an e-mail address.
        pattern = re.compile(r"(?<![\w@])@" + re.escape(username) + r"(?![\w-]|\.\w)", re.IGNORECASE)
        _PATTERNS[username] = pattern
    return pattern
