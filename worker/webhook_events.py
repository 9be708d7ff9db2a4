"""The Discourse webhook's contract: where deliveries are posted (``WEBHOOK_PATH``), how a body is
signed (``sign``, ``signature_ok``), the bodies citebot reads (``PostEnvelope``, ``TopicEnvelope``,
``CategoryEnvelope``, ``ReviewableEnvelope``), the events it reads and those an admin must enable.
The receiver that applies it is the webhook app (``worker/app/webhook.py``); the webhook benchmarks
(``eval.bench``) sign and parse with the same functions.

Discourse names each delivery twice: ``X-Discourse-Event-Type`` is the object (``post``, ``topic``,
``category``, ``reviewable``; the body's one key) and ``X-Discourse-Event`` the event
(app/jobs/regular/emit_web_hook_event.rb). Neither header is signed; the body is (HMAC-SHA256 of the
raw bytes in ``X-Discourse-Event-Signature``), and it decides what a delivery queues: a header only
picks the body's shape, and a body of another shape is refused (400).

What each event does to the index (config/initializers/012-web_hook_events.rb says when Discourse sends
them):

- ``post_*``: the post is re-read. A post whose ``action_code`` is ``split_topic`` is the note
  ``PostMover`` leaves in a topic whose posts it moved away (app/models/post_mover.rb,
  ``create_moderator_post_in_original_topic``, created through ``Topic#add_moderator_post`` and
  ``PostCreator``, hence a ``post_created``): that topic is re-read too, and the moved posts followed.
  Moving sends no post event for the moved posts themselves, and no ``topic_created`` for a new
  destination (``PostMover#to_new_topic`` calls ``Topic.create!``; only ``PostCreator`` without a
  ``topic_id`` triggers it), so ``topic_created`` is not read: a new topic's first post arrives as
  ``post_created``;
- ``topic_edited``, ``topic_destroyed``, ``topic_recovered`` and every ``topic_<status>_status_updated``
  (``visible``: listed/unlisted, ``closed``, ``archived``, ``pinned``; ``Topic#update_status`` through
  ``TopicStatusUpdater``): the topic is re-read;
- ``category_created``, ``category_updated``, ``category_destroyed`` (``HasDestroyedWebHook``): the
  category is re-read (``GET /c/{id}/show.json``) and recorded (backfill/categories.py);
- ``reviewable_*`` about a post (``ReviewableFlaggedPost``: the body's ``post_id``, ReviewableSerializer's
  name for a ``Post`` target): hiding a post by flags (``Post#hide!``, app/models/post.rb) sends no
  ``post_edited``, only these. The post is re-read at once and again ``REVIEWABLE_RECHECK_S`` later:
  ``PostActionCreator`` emits the reviewable event before ``auto_hide_if_needed`` hides the post.

An admin enables event *types* on the webhook (``WebHookEventType``, db/fixtures/007_web_hook_event_types.rb).
The ``topic_*_status_updated`` events are delivered under ``topic_edited``, and
``reviewable_score_updated`` / ``reviewable_transitioned_to`` under ``reviewable_updated``
(``WebHook::EVENT_NAME_TO_EVENT_TYPE_MAP``, app/models/web_hook.rb).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from worker.domain import ForumPost

WEBHOOK_PATH = "/webhooks/discourse"

Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
Positive = Annotated[int, Field(ge=1, le=2**31 - 1)]

POST_EVENTS = frozenset({"post_created", "post_edited", "post_destroyed", "post_recovered"})
TOPIC_EVENTS = frozenset({"topic_edited", "topic_destroyed", "topic_recovered"})
# Anchored and without nested repetition: linear in the header's length (tests/test_regex_budget.py).
TOPIC_STATUS_EVENT = re.compile(r"\Atopic_[a-z]{1,32}_status_updated\Z")
CATEGORY_EVENTS = frozenset({"category_created", "category_updated", "category_destroyed"})
REVIEWABLE_EVENTS = frozenset(
    {"reviewable_created", "reviewable_updated", "reviewable_score_updated", "reviewable_transitioned_to"}
)
MOVE_ACTION_CODE = "split_topic"
REVIEWABLE_RECHECK_S = 10.0

# The WebHookEventType names an admin must tick (or send every event): what each family above needs.
REQUIRED_EVENT_TYPES = (
    "post_created",
    "post_edited",
    "post_destroyed",
    "post_recovered",
    "topic_edited",
    "topic_destroyed",
    "topic_recovered",
    "category_created",
    "category_updated",
    "category_destroyed",
    "reviewable_created",
    "reviewable_updated",
)


def family(event: str) -> str | None:
    """``post``, ``topic``, ``category``, ``reviewable``, or None for an event citebot ignores."""
    if event in POST_EVENTS:
        return "post"
    if event in TOPIC_EVENTS or TOPIC_STATUS_EVENT.match(event):
        return "topic"
    if event in CATEGORY_EVENTS:
        return "category"
    if event in REVIEWABLE_EVENTS:
        return "reviewable"
    return None


class _Identified(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: Id


class CategoryEnvelope(BaseModel):
    """``{"category": {"id": …}}``: WebHookCategorySerializer (the rest is re-read from the forum)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    category: _Identified


class _Reviewable(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    id: Id
    type: str | None = None
    post_id: Id | None = None  # ReviewableSerializer: "#{target_type.downcase}_id" for a Post target


class ReviewableEnvelope(BaseModel):
    """``{"reviewable": {...}}``: the reviewable's own serializer (ReviewableFlaggedPostSerializer …)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    reviewable: _Reviewable


class _ReplyTo(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    username: str | None = None


class WebhookPost(BaseModel):
    """The fields of Discourse's WebHookPostSerializer the receiver reads."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: Id
    topic_id: Id
    post_number: Positive = 1
    raw: str | None = None
    cooked: str | None = None
    username: str = ""
    user_id: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
    post_type: Positive = 1
    reply_to_post_number: Positive | None = None
    reply_to_user: _ReplyTo | None = None
    topic_archetype: str | None = "regular"
    hidden: bool = False
    deleted_at: str | None = None
    user_deleted: bool = False
    version: Positive = 1
    action_code: str | None = None

    def to_domain(self) -> ForumPost:
        """The validated payload as a ``ForumPost``, by the one mapping of Discourse's post JSON."""
        return ForumPost.from_json(self.model_dump())


class PostEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    post: WebhookPost


class TopicEnvelope(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    topic: _Identified


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Discourse-Event-Signature`` value Discourse sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    """Constant-time check of ``header`` against the HMAC-SHA256 of the raw body."""
    if not secret or not header:
        return False
    expected = sign(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("utf-8", "replace"))
