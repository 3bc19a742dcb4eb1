"""Idempotency keys: what a key stores, and the fingerprint of the request that made it.

A write with an idempotency key stores, in the key, the version it made and a fingerprint
of its request: ``<version> <32 hex digits>`` (the write script sets it with the write;
a key holding ``<version>`` alone, without a fingerprint, answers as a retry). A
retry is the same request again: the same operation and format, and the same text, or the
same merge object however it is laid out (JSON text or a dict, any key order, ``1e2`` or
``100``; a replace's text is its own request). Another request under a used key is
refused by the store
(:class:`~signals.errors.IdempotencyKeyReusedError`). Pure functions: no I/O here.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from signals.core.memory import parse_merge_input
from signals.core.merge import normalise_numbers
from signals.core.wire import parse_version
from signals.errors import CorruptDataError

__all__ = ("canonical_merge", "parse_stored", "request_fingerprint")

_STORED = re.compile(r"(\d{1,16})(?: ([0-9a-f]{32}))?")


def request_fingerprint(op: str, fmt: str, request: str) -> str:
    """32 hex digits of SHA-256 over the operation, the format and the request's text.
    ``create`` is an operation of its own: a replace under a create's key is not its retry."""
    digest = hashlib.sha256("\0".join((op, fmt, request)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def canonical_merge(update: str | dict[str, Any]) -> str:
    """A merge request as its fingerprint covers it: the JSON object as the merge reads it
    (numbers as it stores them), keys sorted, whether given as JSON text or a dict.

    Raises:
        InvalidInputError: ``update`` is not a mergeable JSON object (the merge itself
            refuses it with the same error).
    """
    value = normalise_numbers(parse_merge_input(update))
    return msgspec.json.encode(value, order="sorted").decode()


def parse_stored(stored: str, what: str) -> tuple[int, str]:
    """The version a key made and its request's fingerprint (``""`` for a key that holds
    no fingerprint), from the key's value.

    Raises:
        CorruptDataError: the value is neither ``<version>`` nor ``<version> <32 hex>``
            (``what`` names the key).
    """
    match = _STORED.fullmatch(stored)
    if match is None:
        raise CorruptDataError(f"{what} is {stored[:80]!r}, not a version and a request fingerprint")
    return parse_version(match[1], what), match[2] or ""
