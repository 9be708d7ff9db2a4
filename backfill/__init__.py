"""Backfill: fill the post index from a Discourse replica, the REST API or an export, and keep it fresh.

``backfill.run.run_backfill`` is the bulk job (``citebot backfill``); ``backfill.incremental`` holds the
per-post updates the webhook actors call. See docs/backfill.md.
"""
