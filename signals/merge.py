"""Schema-mode merge semantics and RFC 7396 JSON merge patches. Pure: no I/O.

:func:`deep_merge` is Mastra's ``deepMergeWorkingMemory``: objects deep-merge, ``null``
deletes a key, arrays (and every other value) replace whole, keys keep their first
position and new keys are appended. :func:`merge_patch` builds the smallest RFC 7396
patch from one object to another; applying it with :func:`deep_merge` gives the target
back whenever the target holds no ``null`` member (callers verify, see the processor).
"""

from __future__ import annotations

from typing import Any

__all__ = ("deep_merge", "merge_patch", "normalise_numbers")


def deep_merge(existing: Any, update: Any) -> dict[str, Any]:
    """Merge ``update`` into ``existing`` (neither is modified) and return the result."""
    base: dict[str, Any] = dict(existing) if isinstance(existing, dict) else {}
    if not isinstance(update, dict):
        return base
    for key, value in update.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict):
            current = base.get(key)
            base[key] = deep_merge(current if isinstance(current, dict) else None, value)
        else:
            base[key] = value
    return base


def merge_patch(source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """The RFC 7396 merge patch that turns ``source`` into ``target``."""
    patch: dict[str, Any] = {}
    for key in source:
        if key not in target:
            patch[key] = None
    for key, value in target.items():
        if key not in source:
            patch[key] = value
            continue
        old = source[key]
        if isinstance(value, dict) and isinstance(old, dict):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif value != old or type(value) is not type(old):
            patch[key] = value
    return patch


def normalise_numbers(value: Any) -> Any:
    """Turn integral floats into ints, as JavaScript's ``JSON.stringify`` prints them."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: normalise_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise_numbers(v) for v in value]
    return value
