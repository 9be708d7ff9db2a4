"""Clients of external services: one ``*Client`` per service over an injected ``httpx.Client``."""
