"""Which indexed posts may be cited now: the one eligibility condition every retrieval query composes in.

What is never evidence (a whisper or small action, a hidden or deleted post, a private message, an
unlisted topic, the bot's own posts, questions to it) never enters ``post_index``: ``backfill.evidence``
decides that when a post is indexed. What can change after, without the post changing, is its
category's visibility, so it is checked again at query time, fail closed: a post is eligible only while
its category is in ``citable_categories`` (``worker/db/migrations/0011_categories.sql``: recorded as
public by the forum, with its ancestors; ``backfill.categories``). A category made private, or never
described, is excluded even if its posts were indexed before.

``ELIGIBLE`` is that condition over a ``post_index`` row aliased ``p``. Every retrieval query that reads
posts to return them spells it through this constant (``tests/worker/retrieval/test_eligibility.py``
checks each one does). The spelling is for the planner: the ``ARRAY(...)`` sub-select is an InitPlan
evaluated once, so the condition stays a plain filter on the HNSW index scan; ``category_id + 0`` keeps
the planner off the category b-tree, whose ``= ANY(...)`` scan plus a sort would replace the ordered
HNSW scan (and pgvector 0.8's iterative scan, which keeps scanning until ``k`` rows pass the filter).
"""

from __future__ import annotations

# The allow-list itself (the view), for the readers that want the categories rather than posts.
CITABLE_CATEGORIES_SQL = "SELECT category_id FROM citable_categories"

# A post_index row ``p`` is eligible now.
ELIGIBLE = f"p.category_id + 0 = ANY(ARRAY({CITABLE_CATEGORIES_SQL}))"
