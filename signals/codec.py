"""Encoders and typed decoders, built once at import; stream fields <-> Structs.

A signal, write event or delivery is one stream entry with one field holding its JSON.
"""

from __future__ import annotations

from typing import Any

import msgspec

from signals.models import DeadLetter, Delivery, Signal, WriteEvent

__all__ = (
    "FIELD",
    "decode_dead_letter",
    "decode_delivery",
    "decode_json",
    "decode_signal",
    "decode_write",
    "encode",
    "encode_json",
)

#: The stream field holding an entry's JSON document.
FIELD = "e"

_encoder = msgspec.json.Encoder()
_signal = msgspec.json.Decoder(Signal)
_write = msgspec.json.Decoder(WriteEvent)
_delivery = msgspec.json.Decoder(Delivery)
_dead = msgspec.json.Decoder(DeadLetter)
_any = msgspec.json.Decoder()


def encode(obj: Any) -> bytes:
    """Encode a Struct (or any JSON-able value) as compact JSON."""
    return _encoder.encode(obj)


def encode_json(obj: Any) -> str:
    """Compact JSON text, key order preserved (what ``JSON.stringify`` gives)."""
    return _encoder.encode(obj).decode()


def decode_json(data: str | bytes) -> Any:
    """Decode untyped JSON; raises ``msgspec.DecodeError`` on bad input."""
    return _any.decode(data)


def decode_signal(data: str | bytes) -> Signal:
    """Decode a signal; raises ``msgspec.ValidationError``/``DecodeError`` on bad input."""
    return _signal.decode(data)


def decode_write(data: str | bytes) -> WriteEvent:
    """Decode a write event; raises ``msgspec.ValidationError``/``DecodeError`` on bad input."""
    return _write.decode(data)


def decode_delivery(data: str | bytes) -> Delivery:
    """Decode a delivery record."""
    return _delivery.decode(data)


def decode_dead_letter(data: str | bytes) -> DeadLetter:
    """Decode a dead letter."""
    return _dead.decode(data)
