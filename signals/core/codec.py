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

from signals.core.models import DeadLetter, Delivery, Signal, WriteEvent

__all__ = (
    "FIELD",
    "decode_dead_letter",
    "decode_delivery",
    "decode_json",
    "decode_signal",
    "decode_write",
    "encode_json",
    "invalid_utf8_at",
)

#: The stream field holding an entry's JSON document.
FIELD = "e"

_encoder = msgspec.json.Encoder()
_signal = msgspec.json.Decoder(Signal)
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


def decode_signal(data: str | bytes) -> Signal:
    """Decode a signal; raises ``msgspec.ValidationError``/``DecodeError`` on bad input."""
    return _decoding(_signal.decode, data)


def decode_write(data: str | bytes) -> WriteEvent:
    """Decode a write event; raises ``msgspec.ValidationError``/``DecodeError`` on bad input."""
    return _decoding(_write.decode, data)


def decode_delivery(data: str | bytes) -> Delivery:
    """Decode a delivery record."""
    return _decoding(_delivery.decode, data)


def decode_dead_letter(data: str | bytes) -> DeadLetter:
    """Decode a dead letter."""
    return _decoding(_dead.decode, data)
