"""The lookup shared by the small registries of ``models/`` (positional encodings, attention layouts)."""

from __future__ import annotations


def registered(registry: dict, kind: str, field: str, what: str):
    """``registry[kind]``, or a ValueError naming ``field``, what it names and the registered kinds."""
    if kind not in registry:
        raise ValueError(f"{field}: unknown {what} {kind!r}; choose one of {sorted(registry)}.")
    return registry[kind]
