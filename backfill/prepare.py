"""Per-post text preparation: eligibility (``backfill.evidence``), the embedded text, its truncation
and its digest.

Text = topic title, category, tags, then the post's own text (``html_text.html_to_text``), cut to the
model's max sequence length in tokens. The digest of (strategy, model, text) decides whether a post must
be embedded again: same digest, no embedder call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from backfill.evidence import ineligibility
from backfill.sources import SourcePost
from worker.html_text import html_to_text

# Bump when the text recipe changes: every digest changes with it, so the next run re-embeds everything.
STRATEGY_VERSION = "post-v1"
# Average characters per token for English prose under WordPiece/BPE vocabularies (MiniLM, bge: ~4.2);
# code and non-Latin scripts have fewer, so 4 errs on the short side and the model cuts any excess.
CHARS_PER_TOKEN = 4.0
# [CLS] and [SEP] (or <s> </s>) take two positions of the model's sequence.
SPECIAL_TOKENS = 2


@dataclass(frozen=True, slots=True)
class PreparedPost:
    """A post ready to be compared with the index and, if new or changed, embedded."""

    post: SourcePost
    text: str
    digest: bytes


class Truncator:
    """Cuts text to ``max_tokens`` model tokens: exactly with a tokenizer, else by characters."""

    def __init__(self, max_tokens: int, tokenizer: Any | None = None) -> None:
        if max_tokens <= SPECIAL_TOKENS:
            raise ValueError("max_tokens must leave room for the special tokens")
        self.budget = max_tokens - SPECIAL_TOKENS
        self.tokenizer = tokenizer
        self.max_chars = int(self.budget * CHARS_PER_TOKEN)

    @property
    def exact(self) -> bool:
        return self.tokenizer is not None

    def __call__(self, text: str) -> str:
        if self.tokenizer is None:
            return _cut_chars(text, self.max_chars)
        if len(text) <= self.budget:  # a token covers at least one character
            return text
        enc = self.tokenizer(
            text,
            add_special_tokens=False,
            truncation=True,
            max_length=self.budget,
            return_offsets_mapping=True,
        )
        offsets = enc["offset_mapping"]
        if len(offsets) < self.budget:
            return text
        end = int(offsets[-1][1])
        return text[:end].rstrip()


def _cut_chars(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ", limit - 40)
    return (cut[:space] if space > 0 else cut).rstrip()


def compose_text(post: SourcePost) -> str:
    """Title, category, tags and body, before truncation; empty when the post has no text of its own."""
    body = html_to_text(post.cooked) if post.cooked else (post.raw or "").strip()
    if not body:
        return ""
    head = [post.topic_title.strip()]
    if post.category_name:
        head.append(f"Category: {post.category_name}")
    if post.tags:
        head.append("Tags: " + ", ".join(post.tags))
    return "\n".join(head) + "\n\n" + body


def digest(text: str, model: str) -> bytes:
    """SHA-256 of (strategy version, model, text): equal digests mean an identical vector."""
    return hashlib.sha256(f"{STRATEGY_VERSION}\0{model}\0{text}".encode()).digest()


class Preparer:
    """Turns source posts into ``PreparedPost``s (eligible) or removal reasons (ineligible)."""

    def __init__(
        self,
        model: str,
        truncate: Callable[[str], str],
        excluded_authors: Collection[str] = (),
        category_names: Mapping[int, str] | None = None,
    ) -> None:
        self.model = model
        self.truncate = truncate
        self.excluded_authors = frozenset(a.lower() for a in excluded_authors)
        # The recorded names (``backfill.categories.names``) win over what the source says; the
        # source's own name serves only a category not recorded yet.
        self.category_names = dict(category_names or {})

    def prepare(self, post: SourcePost, restricted: Collection[int] = ()) -> PreparedPost | str:
        """The prepared post, or the reason it is not indexed (ineligible, or no text of its own)."""
        reason = ineligibility(post, restricted, self.excluded_authors)
        if reason is not None:
            return reason
        recorded = self.category_names.get(post.category_id) if post.category_id is not None else None
        if recorded is not None and recorded != post.category_name:
            post = replace(post, category_name=recorded)
        text = compose_text(post)
        if not text:
            return "empty"
        text = self.truncate(text)
        return PreparedPost(post, text, digest(text, self.model))
