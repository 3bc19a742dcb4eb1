"""Schema-mode merge semantics and RFC 7396 JSON merge patches. Pure: no I/O.

:func:`deep_merge` is Mastra's ``deepMergeWorkingMemory``: objects deep-merge, ``null``
deletes a key, arrays (and every other value) replace whole, keys keep their first
position and new keys are appended. :func:`merge_patch` builds the smallest RFC 7396
patch from one object to another; applying it with :func:`deep_merge` gives the target
back whenever the target holds no ``null`` member (callers verify, see the processor).

:func:`check_json_value` is the gate in front of both: a merge update (or a stored
document) must be plain JSON, at most :data:`MAX_DEPTH` containers deep, or it is refused
before anything recurses into it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from signals.core.codec import invalid_utf8_at
from signals.errors import InvalidInputError

__all__ = ("MAX_DEPTH", "check_json_value", "deep_merge", "json_path", "merge_patch", "normalise_numbers")

#: The deepest nesting of objects and arrays accepted in a JSON working-memory document
#: or merge update: ``{"a": {"b": 1}}`` is 2 deep. Far beyond any real working memory,
#: far below where recursion over it (merge, diff, encoding) could exhaust the stack.
MAX_DEPTH = 64

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def json_path(parts: tuple[str | int, ...]) -> str:
    """A value's place in a document: ``$``, ``$.a.b[2]``, ``$['odd key']``; a deep path
    keeps its first six and last three steps (``$.a.b.c.d.e.f…x.y.z``)."""
    steps = [f"[{p}]" if isinstance(p, int) else "." + p if _PLAIN_KEY.fullmatch(p) else f"[{p[:40]!r}]"
             for p in parts]
    if len(steps) > 12:
        steps = [*steps[:6], "…", *steps[-3:]]
    return "$" + "".join(steps)


def check_json_value(value: Any, *, what: str = "merge input", max_depth: int = MAX_DEPTH) -> None:
    """Refuse anything JSON cannot represent exactly, naming the path of the bad value.

    Accepted: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite ``float``,
    ``bool`` and ``None``, nested at most ``max_depth`` containers deep. Refused, with
    :class:`~signals.errors.InvalidInputError`: NaN and infinities (JSON has no such
    numbers; they would be stored as ``null``), ``bytes`` (stored as base64 text),
    ``set``, ``frozenset`` and ``tuple`` (stored as arrays and read back as lists: the
    document would not read back equal to what was written; pass a list), non-string keys
    (stored as strings), strings with lone surrogates (not UTF-8), any other object, and
    nesting deeper than ``max_depth``. The walk is iterative: it never recurses, so a
    hostile depth cannot exhaust the stack here.
    """
    if not _is_plain(value, max_depth):
        _refuse_first_problem(value, what, max_depth)


def _is_plain(value: Any, max_depth: int) -> bool:
    """The fast walk: exact JSON types only, no paths kept (the usual case costs little).

    ``False`` sends the value to :func:`_refuse_first_problem`, which names the problem
    (or, for subclasses of the JSON types, accepts the value after all).
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if depth >= max_depth or (kind is dict and not all(map(_plain_key, item))):
                return False
            stack.extend((v, depth + 1) for v in (item.values() if kind is dict else item))
        elif not _plain_scalar(item, kind):
            return False
    return True


def _plain_key(key: object) -> bool:
    return type(key) is str and invalid_utf8_at(key) is None


def _plain_scalar(item: Any, kind: type) -> bool:
    if kind is str:
        return invalid_utf8_at(item) is None
    if kind is float:
        return math.isfinite(item)
    return kind is int or kind is bool or item is None


def _refuse_first_problem(value: Any, what: str, max_depth: int) -> None:
    """The slow walk, keeping each value's path: raises for the first problem found."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict | list):
            if len(path) >= max_depth:
                raise InvalidInputError(f"{what}: nested deeper than {max_depth} objects/arrays "
                                        f"(at {json_path(path)})")
            if isinstance(item, list):
                stack.extend((v, (*path, i)) for i, v in enumerate(item))
            else:
                for key, v in item.items():
                    _check_key(key, path, what)
                    stack.append((v, (*path, key)))
        else:
            _check_scalar(item, path, what)


def _check_key(key: object, path: tuple[str | int, ...], what: str) -> None:
    if not isinstance(key, str):
        raise InvalidInputError(f"{what}: key {key!r} in the object at {json_path(path)} is a "
                                f"{type(key).__name__}: JSON object keys are strings")
    position = invalid_utf8_at(key)
    if position is not None:
        raise InvalidInputError(f"{what}: a key in the object at {json_path(path)} is not valid UTF-8 text "
                                f"(a lone surrogate at position {position})")


def _check_scalar(item: object, path: tuple[str | int, ...], what: str) -> None:
    if isinstance(item, str):
        position = invalid_utf8_at(item)
        if position is not None:
            raise InvalidInputError(f"{what}: the string at {json_path(path)} is not valid UTF-8 text "
                                    f"(a lone surrogate at position {position})")
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise InvalidInputError(f"{what}: {item!r} at {json_path(path)} is not a JSON number")
    elif not (isinstance(item, bool | int) or item is None):
        hint = "; pass a list" if isinstance(item, tuple | set | frozenset) else ""
        raise InvalidInputError(f"{what}: a {type(item).__name__} at {json_path(path)} is not a JSON "
                                f"value (use dict, list, str, int, float, bool or None{hint})")


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
