"""What enters the index as evidence: one rule, used by the bulk backfill and the incremental indexer.

The index holds what the forum *knows*, never what it is asking. A post is left out when:

- its author is the bot (``bot_author``): the bot never cites its own replies, nor its "I don't know";
- it is addressed to the bot (``addressed_to_bot``): it mentions ``@bot`` outside quotes and code, it
  replies to one of the bot's posts, or it quotes one (``worker.quotes``). Such a post is a question
  (or a remark) for the bot, and indexing it made the bot cite a member's question as the answer to
  the next member who asked the same; a post that quotes the bot carries the bot's own words, which
  are never evidence. Reading the quote is also how a quote-reply to the bot is recognised: Discourse
  serializes a reply that quotes its parent without ``reply_to_user`` (``suppress_reply_when_quoting``,
  on by default; ``PostSerializer#include_reply_to_user?``), so ``reply_to_username`` is empty there;
- it is a topic's first post that no one has answered yet (``open_question``): none of the topic's
  other posts is evidence by the rules above. Once a reply that is evidence exists, the first post is
  indexed as the context of its answers (a resolved question stays findable by its wording);
- it is not public forum content (post type, deleted: trashed or withdrawn by its author
  (``worker.domain.ForumPost``), hidden, private message, unlisted or deleted topic, read-restricted
  category, no category at all).

A post whose category the forum has not described yet is indexed but not cited: recall reads only the
categories recorded as public (``backfill.categories``). A topic with no category is not evidence:
Discourse files every regular topic under a category (Uncategorized, ``uncategorized_category_id``, when
none is chosen), so a post without one is a private message or an export that lost the field.

``SourcePost.replies`` carries the topic's other posts for a first post (the sources read at most the
first ``REPLY_WINDOW`` of them: one page of Discourse's post stream); ``None`` means the source cannot
tell, and the first post is then kept, as before this rule. docs/backfill.md has the measurement.
"""

from __future__ import annotations

from collections.abc import Collection

from backfill.sources import SourcePost
from worker.addressing import cooked_mentions, mentions
from worker.quotes import quotes_user

# One page of Discourse's post stream (``GET /t/{id}.json`` serves the first 20 posts).
REPLY_WINDOW = 20


def ineligibility(
    post: SourcePost, restricted: Collection[int] = (), excluded_authors: Collection[str] = ()
) -> str | None:
    """Why the post must not be in the index, or None when it is evidence.

    ``excluded_authors`` are the bot's lower-case usernames (``backfill.compose.bot_authors``).
    """
    reason = _own_ineligibility(post, restricted, excluded_authors)
    if reason is None and post.post_number == 1 and post.replies is not None:
        answered = any(
            _own_ineligibility(r, restricted, excluded_authors, topic_rules=False) is None
            for r in post.replies[:REPLY_WINDOW]
            if r.post_id != post.post_id
        )
        if not answered:
            return "open_question"
    return reason


def _own_ineligibility(
    post: SourcePost,
    restricted: Collection[int],
    excluded_authors: Collection[str],
    *,
    topic_rules: bool = True,
) -> str | None:
    """The rules that look at the post alone (the recall filter of docs/retrieval.md, the bot, addressing).

    ``topic_rules=False``: a reply of the first post's own topic, whose topic fields the sources leave
    out (the first post's decide them): only the post's own rules apply."""
    if post.username is not None and post.username.lower() in excluded_authors:
        return "bot_author"
    if post.post_type != 1:
        return "post_type"
    if post.deleted:
        return "deleted"
    if post.hidden:
        return "hidden"
    if not topic_rules:
        return "addressed_to_bot" if excluded_authors and addressed_to(post, excluded_authors) else None
    if post.archetype != "regular":
        return "private_message"
    if post.topic_deleted:
        return "topic_deleted"
    if not post.topic_visible:
        return "unlisted"
    if post.category_id is None:
        return "no_category"
    if post.category_read_restricted or post.category_id in restricted:
        return "restricted"
    if excluded_authors and addressed_to(post, excluded_authors):
        return "addressed_to_bot"
    return None


def addressed_to(post: SourcePost, usernames: Collection[str]) -> bool:
    """The post mentions one of ``usernames`` where Discourse would notify them, replies to one of
    their posts, or quotes one: the webhook's reading of a mention (``worker.addressing``; the cooked
    HTML decides when there is one, else the raw Markdown), and the quote that stands for a
    quote-reply's missing ``reply_to_user`` (``worker.quotes``)."""
    names = {u.lower() for u in usernames}
    if post.reply_to_username is not None and post.reply_to_username.lower() in names:
        return True
    if quotes_user(post.cooked, post.raw, names):
        return True
    if post.cooked:
        return any(cooked_mentions(post.cooked, name) for name in names)
    return bool(post.raw) and any(mentions(post.raw or "", name) for name in names)
