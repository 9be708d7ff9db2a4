"""Request parameters as the double's routes read them (Rails' ``to_i`` leniency left out on purpose)."""

from __future__ import annotations


def int_param(value: object) -> int | None:
    """A parameter as an int: None when absent, empty, a boolean, or not a number."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
