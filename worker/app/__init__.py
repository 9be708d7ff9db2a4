"""The applications: what composes citebot's core and starts its processes.

``cli`` and ``commands/`` are the ``citebot`` command (every process starts through it: ``webhook
serve``, ``worker run``, ``poll``, ``backfill``, …), ``assemble`` is the worker's composition root and
``webhook`` the webhook app (ASGI). This package sits above ``backfill`` and ``eval`` and imports what
it starts from them directly; nothing below it imports it (tests/packaging/test_import_direction.py).
"""
