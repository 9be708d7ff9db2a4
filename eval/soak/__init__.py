"""The reliability suite (docs/reliability.md): ``python -m eval.soak``.

The whole stack on loopback — embedded PostgreSQL + pgvector, a private Redis, the local forum, the
webhook app, two ``citebot worker run`` processes, the ``citebot poll`` catch-up poller, TEI- and
OpenAI-contract servers — answering N member questions while faults are injected (webhook storms,
dropped webhooks, worker SIGKILL, Redis and PostgreSQL restarts, 429 / 5xx / slow services), then a
reconciliation of the forum against the questions. See docs/reliability.md.
"""
