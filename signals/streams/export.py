"""The lane export file: a lane's signals and a thread's deliveries as JSON lines.

One record a line, UTF-8, each ending in a newline: first the signals in stream order,
``{"kind":"signal","entryId":…,"signal":{…},"delivery":null}``, then the deliveries,
``{"kind":"delivery","entryId":null,"signal":null,"delivery":{…}}`` (the wire types'
camelCase JSON). ``wm-signals export`` writes it from Redis; ``wm-signals replay --file``
reads it back with no Redis and rebuilds or verifies it with
:func:`signals.streams.replay.materialise`.

This module only writes and reads the format: it does not talk to Redis and checks
nothing beyond each record's shape, a signal's entry id and a delivery's window name
included (reading a file is not verifying it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import msgspec

from signals.core.codec import encode_json
from signals.core.lane import is_stream_id
from signals.core.models import Delivery, Signal
from signals.core.window import WINDOW_ID
from signals.errors import InvalidInputError

__all__ = ("LaneExport", "decode_export", "encode_export", "read_export", "write_export")


class _Line(msgspec.Struct, kw_only=True, rename="camel"):
    kind: str
    entry_id: str | None = None
    signal: Signal | None = None
    delivery: Delivery | None = None


_decoder = msgspec.json.Decoder(_Line)


class LaneExport(NamedTuple):
    """What an export file holds."""

    signals: list[tuple[str, Signal]]
    """``(entry id, signal)`` in stream order (a record without an id gets its line number)."""
    deliveries: list[Delivery]
    """The thread's delivery log, in order."""


def encode_export(signals: Iterable[tuple[str, Signal]], deliveries: Iterable[Delivery]) -> str:
    """The file's text: one JSON line per signal, then one per delivery."""
    lines = [encode_json(_Line(kind="signal", entry_id=eid, signal=s)) for eid, s in signals]
    lines += [encode_json(_Line(kind="delivery", delivery=d)) for d in deliveries]
    return "".join(line + "\n" for line in lines)


def decode_export(data: bytes, *, source: str = "export") -> LaneExport:
    """Read an export's records back; blank lines are skipped.

    Raises:
        InvalidInputError: a line is not an export record (``source`` and the line
            number name it).
    """
    out = LaneExport([], [])
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = _decoder.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise InvalidInputError(f"{source} line {number}: not an export record: {e}") from e
        except RecursionError as e:
            raise InvalidInputError(f"{source} line {number}: not an export record: JSON nested too deeply") from e
        if record.kind == "signal" and record.signal is not None:
            entry_id = record.entry_id
            if entry_id is not None and not is_stream_id(entry_id):  # replay names entries by it
                raise InvalidInputError(f"{source} line {number}: entryId {entry_id[:80]!r} is not a stream id "
                                        "(<ms>-<seq>, each a 64-bit unsigned integer)")
            out.signals.append((entry_id or str(number), record.signal))
        elif record.kind == "delivery" and record.delivery is not None:
            window = record.delivery.window
            if window is not None and not WINDOW_ID.fullmatch(window):  # shown as a name by replay
                raise InvalidInputError(f"{source} line {number}: window {window[:80]!r} is not a window name")
            out.deliveries.append(record.delivery)
        else:
            raise InvalidInputError(f"{source} line {number}: unknown record kind {record.kind!r}")
    return out


def write_export(path: str | os.PathLike[str], signals: Iterable[tuple[str, Signal]],
                 deliveries: Iterable[Delivery]) -> None:
    """Write an export file (replacing ``path``); ``OSError`` when it cannot be written."""
    Path(path).write_text(encode_export(signals, deliveries), encoding="utf-8")


def read_export(path: str | os.PathLike[str]) -> LaneExport:
    """Read an export file; ``OSError`` when it cannot be read.

    Raises:
        InvalidInputError: a line is not an export record (the path and line number name it).
    """
    return decode_export(Path(path).read_bytes(), source=os.fspath(path))
