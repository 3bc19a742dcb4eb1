"""Encoders and typed decoders, built once at import; stream fields <-> Structs.

A signal, write event or delivery is one stream entry with one field holding its JSON.
Every decoder reports bad input as ``msgspec.DecodeError`` (or ``ValidationError`` for a
typed one), including the two failures msgspec itself raises otherwise: JSON nested
deeper than its recursion limit (``RecursionError``) and ``str`` input holding lone
surrogates, which is not UTF-8 (``UnicodeEncodeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from signals.core.models import TAG_NAME, Attributes, DeadLetter, Delivery, Mode, Signal, WriteEvent
from signals.core.wire import lane_owner_id, lane_scope, make_lane

__all__ = (
    "FIELD",
    "decode_dead_letter",
    "decode_delivery",
    "decode_json",
    "decode_signal",
    "decode_write",
    "encode_json",
    "encode_signal",
    "invalid_utf8_at",
)

#: The stream field holding an entry's JSON document.
FIELD = "e"



class _StoredSignal(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True, rename="camel"):
    """A signal as its stream entry holds it: :class:`Signal`'s fields in :class:`Signal`'s
    order, each one that a reader can rebuild left out (see :func:`encode_signal`)."""

    id: str
    mode: Mode
    cache_key: str
    tag_name: str | None = None
    contents: str
    delta: str | None = None
    value: str | None = None
    attributes: Attributes
    version: int
    lane: str
    resource_id: str | None = None
    thread_id: str | None = None
    emitted_at: str | None = None
    base_version: int | None = None
    write_version: int | None = None
    policy: str | None = None


_encoder = msgspec.json.Encoder()
_signal = msgspec.json.Decoder(_StoredSignal)
_write = msgspec.json.Decoder(WriteEvent)
_delivery = msgspec.json.Decoder(Delivery)
_dead = msgspec.json.Decoder(DeadLetter)
_any = msgspec.json.Decoder()

T = TypeVar("T")


def _decoding(decode: Callable[[str | bytes], T], data: str | bytes) -> T:
    """``decode(data)`` with every malformed-input failure as ``msgspec.DecodeError``."""
    try:
        return decode(data)
    except RecursionError as e:
        raise msgspec.DecodeError("JSON is nested too deeply") from e
    except UnicodeEncodeError as e:
        raise msgspec.DecodeError(f"not valid UTF-8 text (a lone surrogate at position {e.start})") from e


def invalid_utf8_at(text: str) -> int | None:
    """The position of the first character of ``text`` that is not UTF-8 encodable (a lone
    surrogate: invalid bytes read from Redis arrive as those), or ``None``."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def encode_json(obj: Any) -> str:
    """Compact JSON text, key order preserved (what ``JSON.stringify`` gives)."""
    return _encoder.encode(obj).decode()


def decode_json(data: str | bytes) -> Any:
    """Decode untyped JSON; raises ``msgspec.DecodeError`` on bad input."""
    return _decoding(_any.decode, data)


def encode_signal(signal: Signal) -> str:
    """A signal's stream entry: its JSON without what :func:`decode_signal` rebuilds.

    Each text is stored once: a snapshot's ``value`` is its ``contents`` and a delta's
    ``delta`` is its ``contents`` (Mastra carries both), so they are left out when equal;
    ``tagName`` is left out when it is ``working-memory`` (always), ``resourceId`` on a
    resource lane and ``threadId`` on a thread lane when the lane's id names them. A
    delta's ``value`` is stored when the signal carries one (the worker's
    ``omit_delta_value`` setting leaves it out). The fields keep :class:`Signal`'s order:
    an entry starts ``{"id":"working-memory","mode":...``.
    """
    lane, resource_id, thread_id = signal.lane, signal.resource_id, signal.thread_id
    stored = _StoredSignal(
        id=signal.id, mode=signal.mode, cache_key=signal.cache_key,
        tag_name=None if signal.tag_name == TAG_NAME else signal.tag_name,
        contents=signal.contents,
        delta=None if signal.delta == signal.contents and signal.mode == "delta" else signal.delta,
        value=None if signal.value == signal.contents and signal.mode == "snapshot" else signal.value,
        attributes=signal.attributes, version=signal.version, lane=lane,
        resource_id=None if resource_id is not None and lane == make_lane("resource", resource_id) else resource_id,
        thread_id=None if thread_id is not None and lane == make_lane("thread", thread_id) else thread_id,
        emitted_at=signal.emitted_at, base_version=signal.base_version, write_version=signal.write_version,
        policy=signal.policy,
    )
    return _encoder.encode(stored).decode()


def decode_signal(data: str | bytes) -> Signal:
    """Decode a signal's stream entry into its whole (Mastra-shaped) signal: what
    :func:`encode_signal` left out is put back, and an entry that holds every field (as
    :func:`encode_json` writes a signal) decodes as it is.

    A delta's ``value`` stays ``None`` when the entry has none: it is the text the chain
    rebuilds (:func:`signals.streams.replay.materialise`).

    Raises:
        msgspec.ValidationError: (or ``DecodeError``) on bad input.
    """
    s = _decoding(_signal.decode, data)
    lane, mode, contents = s.lane, s.mode, s.contents
    resource_id, thread_id = s.resource_id, s.thread_id
    scope = lane_scope(lane)
    if resource_id is None and scope == "resource":
        resource_id = lane_owner_id(lane)
    if thread_id is None and scope == "thread":
        thread_id = lane_owner_id(lane)
    return Signal(
        id=s.id, mode=mode, cache_key=s.cache_key, tag_name=TAG_NAME if s.tag_name is None else s.tag_name,
        contents=contents, delta=contents if s.delta is None and mode == "delta" else s.delta,
        value=contents if s.value is None and mode == "snapshot" else s.value,
        attributes=s.attributes, version=s.version, lane=lane, resource_id=resource_id, thread_id=thread_id,
        emitted_at=s.emitted_at, base_version=s.base_version, write_version=s.write_version, policy=s.policy,
    )


def decode_write(data: str | bytes) -> WriteEvent:
    """Decode a write event; raises ``msgspec.ValidationError``/``DecodeError`` on bad input."""
    return _decoding(_write.decode, data)


def decode_delivery(data: str | bytes) -> Delivery:
    """Decode a delivery record."""
    return _decoding(_delivery.decode, data)


def decode_dead_letter(data: str | bytes) -> DeadLetter:
    """Decode a dead letter."""
    return _decoding(_dead.decode, data)
