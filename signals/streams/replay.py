"""Read a lane's signal history back, rebuild each version, verify the chain.

Read-only: it never joins a consumer group and never writes. Nothing read is trusted:

* :func:`xrange_entries` / :func:`xread_entries` read stream entries as bytes and decode
  them one by one, so an entry that is not UTF-8 is one bad entry, not a reply that
  cannot be read (redis-py would raise ``UnicodeDecodeError`` for the whole batch).
* :func:`decode_entry` turns one entry into a :class:`~signals.core.models.Signal` or raises
  :class:`~signals.errors.VerifyError` naming the entry id and what is wrong: no ``e``
  field, not JSON, wrong types, a ``lane`` that is not this stream's lane, a version
  outside 1..2**53, inconsistent fields, or (given a :class:`~signals.core.signing.Signer`)
  a missing or wrong MAC. Replay and verification report such an entry; the live readers
  (:mod:`signals.streams.subscribe`) skip it and log a warning.
* :func:`materialise` walks signals in order, folding strictly
  (:func:`signals.core.fold.next_text`): a snapshot sets the text, a delta applies to the
  text of the version it names (``baseVersion``, or the previous signal); each rebuilt
  text must hash to the signal's cacheKey (:func:`text_problem`). The first failure raises
  :class:`~signals.errors.VerifyError` naming the entry.
Checking the chain against the stored document is :mod:`signals.streams.verify`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from redis import exceptions as redis_exc

from signals.core.codec import FIELD, decode_signal
from signals.core.fold import key_problem, next_text
from signals.core.models import STATE_ID, TAG_NAME, Signal
from signals.core.signing import MAC_FIELD, Signer
from signals.core.wire import MAX_VERSION, lane_owner_id, lane_scope
from signals.errors import CorruptDataError, HistoryTrimmedError, VerifyError
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_wrong_type

__all__ = (
    "Materialised",
    "RawEntry",
    "decode_entry",
    "fields_problem",
    "iter_signals",
    "materialise",
    "raw_command",
    "read_signals",
    "signal_problem",
    "text_problem",
    "trimmed_before",
    "xrange_entries",
    "xread_entries",
    "xread_streams",
)

_NEVER_DECODE: Final = {"NEVER_DECODE": True}

RawEntry = tuple[str, dict[str, str] | None]
"""A stream entry: its id and its fields, ``None`` when a field name or value is not UTF-8."""


@dataclass(frozen=True, slots=True)
class Materialised:
    """A signal with the full text the model can rebuild after it."""

    entry_id: str
    signal: Signal
    value: str


def _text(raw: object) -> str | None:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _raw_entry(entry: Any) -> RawEntry:
    entry_id = _text(entry[0]) or repr(entry[0])
    fields: dict[str, str] = {}
    for name, value in (entry[1] or {}).items():
        key, text = _text(name), _text(value)
        if key is None or text is None:
            return entry_id, None
        fields[key] = text
    return entry_id, fields


async def raw_command(redis: Client, key: str, args: list[str | int], *, kind: str = "a stream") -> Any:
    """Run a read of ``key`` with its reply left undecoded (bytes); a key of another type
    is corrupt data (:class:`~signals.errors.CorruptDataError` naming the key and the
    ``kind`` it should be)."""
    try:
        return await redis.execute_command(*args, **_NEVER_DECODE)
    except redis_exc.ResponseError as e:
        if is_wrong_type(e):
            raise CorruptDataError(f"{key} is not {kind}") from e
        raise


async def xrange_entries(
    redis: Client, key: str, *, start: str = "-", end: str = "+", count: int | None = None, newest_first: bool = False
) -> list[RawEntry]:
    """XRANGE (XREVRANGE with ``newest_first``), each entry's fields decoded on its own
    (see :data:`RawEntry`).

    Raises:
        CorruptDataError: ``key`` holds something other than a stream.
    """
    args: list[str | int] = ["XREVRANGE", key, end, start] if newest_first else ["XRANGE", key, start, end]
    if count is not None:
        args += ["COUNT", count]
    reply = await raw_command(redis, key, args)
    return [_raw_entry(entry) for entry in reply or []]


async def xread_entries(
    redis: Client, key: str, last_id: str, *, count: int, block: int | None = None
) -> list[RawEntry]:
    """XREAD of one stream after ``last_id`` (waiting up to ``block`` ms), like :func:`xrange_entries`.

    Raises:
        CorruptDataError: ``key`` holds something other than a stream.
    """
    args: list[str | int] = ["XREAD", "COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    args += ["STREAMS", key, last_id]
    reply = await raw_command(redis, key, args)
    return [_raw_entry(entry) for _, entries in reply or [] for entry in entries]


async def xread_streams(
    redis: Client, streams: dict[str, str], *, count: int, block: int | None = None
) -> dict[str, list[RawEntry]]:
    """XREAD of several streams (key -> the last id seen; on Redis Cluster all in one slot),
    waiting up to ``block`` ms; each stream's new entries as :func:`xrange_entries` gives them.

    Raises:
        redis.exceptions.ResponseError: ``WRONGTYPE`` when one of the keys is not a stream
            (Redis does not say which).
    """
    args: list[str | int] = ["XREAD", "COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    args += ["STREAMS", *streams, *streams.values()]
    reply = await redis.execute_command(*args, **_NEVER_DECODE)
    out: dict[str, list[RawEntry]] = {}
    for key, entries in reply or []:
        name = _text(key)
        if name is not None:
            out[name] = [_raw_entry(entry) for entry in entries]
    return out


def signal_problem(signal: Signal, lane: str) -> str | None:
    """What is wrong with a decoded signal on its own, in ``lane``'s stream (``None``: nothing).

    Checks what the type cannot: the identity constants, the lane (and the scope and ids
    it implies), versions within 1..2**53, and no delta fields on a snapshot. Whether it
    chains onto its predecessor, and whether its text fields agree with the rebuilt text
    (:func:`text_problem`), are the reader's checks.
    """
    return _identity_problem(signal, lane) or _shape_problem(signal)


def _identity_problem(signal: Signal, lane: str) -> str | None:
    if signal.id != STATE_ID or signal.tag_name != TAG_NAME:
        return f"id/tagName {signal.id[:40]!r}/{signal.tag_name[:40]!r}, not {STATE_ID!r}"
    if signal.lane != lane:
        return f"lane field {signal.lane[:80]!r} is not this stream's lane {lane!r}"
    scope = lane_scope(lane)
    if signal.attributes.scope != scope:
        return f"scope {signal.attributes.scope!r} does not fit lane {lane!r}"
    name, owner = ("resourceId", signal.resource_id) if scope == "resource" else ("threadId", signal.thread_id)
    if owner is not None and owner != lane_owner_id(lane):
        return f"{name} {owner[:80]!r} does not fit lane {lane!r}"
    return None


def _shape_problem(signal: Signal) -> str | None:
    for name, number in (("version", signal.version), ("baseVersion", signal.base_version),
                         ("writeVersion", signal.write_version)):
        if number is not None and not 1 <= number <= MAX_VERSION:
            return f"{name} {str(number)[:40]} is outside 1..2**53"
    if signal.mode == "snapshot" and (signal.attributes.patch is not None or signal.delta is not None
                                      or signal.base_version is not None):
        return "a snapshot with delta fields (patch, delta or baseVersion)"
    return None


def text_problem(signal: Signal, value: str) -> str | None:
    """What is wrong with ``signal`` given the text rebuilt after it (``None``: nothing):
    the cacheKey must hash it (:func:`signals.core.fold.key_problem`), and
    :func:`fields_problem`."""
    return key_problem(signal, value) or fields_problem(signal, value)


def fields_problem(signal: Signal, value: str) -> str | None:
    """What is wrong with ``signal``'s own copies given the text rebuilt after it (``None``:
    nothing): ``value`` and ``delta``, when present, must repeat the rebuilt text and the
    contents."""
    if signal.value is not None and signal.value != value:
        return "value differs from the rebuilt text"
    if signal.mode == "delta" and signal.delta is not None and signal.delta != signal.contents:
        return "delta field differs from its contents"
    return None


def decode_entry(lane: str, entry: RawEntry, *, signer: Signer | None = None) -> Signal:
    """One stream entry of ``lane``'s signal stream as a checked signal.

    Args:
        lane: the lane whose stream the entry was read from.
        entry: the entry as :func:`xrange_entries` returns it.
        signer: when given, the entry must carry a valid MAC (:mod:`signals.core.signing`).

    Raises:
        VerifyError: the entry is not a signal of this lane (names the entry id and why).
    """
    entry_id, fields = entry
    where = f"entry {entry_id} of {lane}"
    if fields is None:
        raise VerifyError(f"{where}: not a signal: a field is not UTF-8 text")
    payload = fields.get(FIELD)
    if payload is None:
        raise VerifyError(f"{where}: not a signal: no {FIELD!r} field (fields {sorted(fields)[:5]})")
    if signer is not None and not signer.check(lane, payload, fields.get(MAC_FIELD)):
        what = "no MAC" if MAC_FIELD not in fields else "a MAC that does not check"
        raise VerifyError(f"{where}: refused: {what} (no worker holding the signing key wrote it)")
    try:
        signal = decode_signal(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError) as e:
        raise VerifyError(f"{where}: not a signal: {str(e)[:200]}") from e
    problem = signal_problem(signal, lane)
    if problem is not None:
        raise VerifyError(f"{where}: {problem}")
    return signal


async def iter_signals(
    redis: Client, keys: Keys, lane: str, *, start: str = "-", end: str = "+", page: int = 2000,
    signer: Signer | None = None,
) -> AsyncIterator[tuple[str, Signal]]:
    """Yield ``(entry id, signal)`` of a lane's stream in order, paging with XRANGE.

    Each page after the first is read from the previous page's last entry, inclusive: when
    that entry is gone, the workers trimmed the stream past it between the two reads (their
    retention, at a snapshot boundary), and the entries in between are gone too, so going on
    would yield a history with a hole in it (:class:`HistoryTrimmedError`;
    :func:`read_signals` reads again).

    Raises:
        VerifyError: at the first entry that is not a signal of the lane (see
            :func:`decode_entry`), or when the lane's key is not a stream.
        HistoryTrimmedError: the stream was trimmed past the entries read so far.
    """
    stream = keys.signals(lane)
    cursor, last = start, None
    while True:
        try:
            count = page if last is None else page + 1  # the previous page's last entry, then a page
            entries = await xrange_entries(redis, stream, start=cursor, end=end, count=count)
        except CorruptDataError as e:
            raise VerifyError(f"signal stream of {lane}: {e}") from e
        if last is not None:
            if not entries or entries[0][0] != last:
                raise HistoryTrimmedError(f"signal stream of {lane} was trimmed past entry {last} while being read")
            entries = entries[1:]
        for entry in entries:
            yield entry[0], decode_entry(lane, entry, signer=signer)
        if len(entries) < page:
            return
        cursor = last = entries[-1][0]


#: How many times :func:`read_signals` reads a history the workers keep trimming under it.
READ_ATTEMPTS = 5


async def read_signals(
    redis: Client, keys: Keys, lane: str, *, signer: Signer | None = None, page: int = 2000
) -> list[tuple[str, Signal]]:
    """The lane's whole retained history; raises :class:`VerifyError` at a bad entry.

    A history longer than ``page`` is read in several XRANGEs; when the workers trim the
    stream between two of them, it is read again from its new start (at most
    :data:`READ_ATTEMPTS` times, then :class:`HistoryTrimmedError`).
    """
    for attempt in range(READ_ATTEMPTS):
        try:
            return [item async for item in iter_signals(redis, keys, lane, signer=signer, page=page)]
        except HistoryTrimmedError:
            if attempt == READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def trimmed_before(signals: list[tuple[str, Signal]]) -> int | None:
    """The first retained version when older history is gone (trimmed by the workers'
    retention, or reset by a repair), else ``None`` (the history starts at version 1, or
    there is none). The workers trim only at snapshot boundaries, so a retained history
    starts at a snapshot and rebuilds every version from this one on."""
    first = signals[0][1].version if signals else 1
    return first if first > 1 else None


def materialise(
    signals: Iterable[tuple[str, Signal]], *, verify: bool = True, lane: str | None = None
) -> Iterator[Materialised]:
    """Rebuild the text after each signal (from the first snapshot on).

    ``lane`` defaults to the first signal's lane; every signal must belong to it.

    Raises:
        VerifyError: a signal that is wrong on its own (:func:`signal_problem`), a delta
            before any snapshot, a version gap or repeat, a delta that does not apply,
            or (with ``verify``) a cacheKey or value that does not match the text, or a
            writeVersion that does not increase (each write yields at most one signal).
    """
    previous: Signal | None = None
    text: str | None = None
    for entry_id, signal in signals:
        lane = lane if lane is not None else signal.lane
        where = f"entry {entry_id} (version {signal.version}, {signal.mode})"
        problem = signal_problem(signal, lane) or _chain_problem(previous, signal, verify=verify)
        if problem is not None:
            raise VerifyError(f"{where}: {problem}")
        try:  # strict: the first link that does not rebuild ends the replay, naming it
            value = next_text(text, signal, strict=True, check_key=verify)
        except CorruptDataError as e:
            raise VerifyError(f"{where}: {e}") from e
        problem = fields_problem(signal, value) if verify else None
        if problem is not None:
            raise VerifyError(f"{where}: {problem}")
        previous, text = signal, value
        yield Materialised(entry_id, signal, value)


def _chain_problem(previous: Signal | None, signal: Signal, *, verify: bool) -> str | None:
    """What keeps ``signal`` from following ``previous`` in a lane's chain."""
    if previous is None:
        return "a delta with no snapshot before it" if signal.mode == "delta" else None
    if signal.version != previous.version + 1:
        return f"follows version {previous.version}"
    if signal.mode == "delta" and signal.base_version is not None and signal.base_version != previous.version:
        return f"applies to version {signal.base_version}, not the previous {previous.version}"
    last, this = previous.write_version, signal.write_version
    if verify and last is not None and this is not None and this <= last:
        return f"writeVersion {this} does not increase (the previous signal's is {last})"
    return None

