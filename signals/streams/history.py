"""Paged reads of a lane's signal history: a page of the newest signals, and the text of
any retained version, without reading the whole stream. Read-only.

A lane with 10,000 signals is read a page at a time (XREVRANGE with COUNT) and a version's
text is rebuilt from the snapshot before it, found by a binary search over the lane's
snapshot list (a few single-entry XRANGEs), then the signals from that snapshot on
(:func:`~signals.streams.replay.materialise`, every text checked against its cacheKey).
When the snapshot list does not lead to the version (the workers trimmed the stream
between two reads, or the list disagrees with the stream), the whole retained history is
read instead (:func:`~signals.streams.replay.read_signals`): slower, never wrong.

Nothing read is trusted: an entry of a page that is not a signal of the lane is returned
in its place with the problem (:class:`PageEntry`), so that one bad entry does not hide
the rest of the page; a version's text comes only from a chain that checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from signals.core.models import Signal
from signals.core.signing import Signer
from signals.errors import CorruptDataError, VerifyError
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.replay import Materialised, decode_entry, materialise, raw_command, read_signals, xrange_entries

__all__ = ("PageEntry", "SignalPage", "first_signal", "signal_page", "version_texts")

#: The most signals :func:`version_texts` materialises from one snapshot before it reads the
#: whole history instead (a chain longer than this is not a chain the workers write).
_MAX_CHAIN = 5_000


@dataclass(frozen=True, slots=True)
class PageEntry:
    """One entry of a page: its signal, or (``signal`` is ``None``) what is wrong with it."""

    entry_id: str
    signal: Signal | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class SignalPage:
    """Signals newest first; ``older`` is the cursor of the next (older) page, ``None`` at the end."""

    entries: tuple[PageEntry, ...]
    older: str | None
    length: int


def _decoded(lane: str, entry: tuple[str, dict[str, str] | None], signer: Signer | None) -> PageEntry:
    try:
        return PageEntry(entry[0], decode_entry(lane, entry, signer=signer))
    except VerifyError as e:
        return PageEntry(entry[0], None, str(e))


async def signal_page(redis: Client, keys: Keys, lane: str, *, before: str | None = None, count: int = 50,
                      signer: Signer | None = None) -> SignalPage:
    """The ``count`` newest signals of the lane older than entry ``before`` (all: the newest).

    Raises:
        VerifyError: the lane's signal key holds something other than a stream.
    """
    stream = keys.signals(lane)
    end = "+" if before is None else "(" + before
    try:
        entries = await xrange_entries(redis, stream, end=end, count=count + 1, newest_first=True)
        length = int(await raw_command(redis, stream, ["XLEN", stream]))
    except CorruptDataError as e:
        raise VerifyError(f"signal stream of {lane}: {e}") from e
    page = tuple(_decoded(lane, entry, signer) for entry in entries[:count])
    return SignalPage(page, page[-1].entry_id if len(entries) > count else None, length)


async def first_signal(redis: Client, keys: Keys, lane: str, *, signer: Signer | None = None) -> PageEntry | None:
    """The oldest retained entry of the lane's stream (where its retained history starts)."""
    stream = keys.signals(lane)
    try:
        entries = await xrange_entries(redis, stream, count=1)
    except CorruptDataError as e:
        raise VerifyError(f"signal stream of {lane}: {e}") from e
    return _decoded(lane, entries[0], signer) if entries else None


async def _snapshot_ids(redis: Client, keys: Keys, lane: str) -> list[str]:
    reply = await raw_command(redis, keys.snapshots(lane), ["LRANGE", keys.snapshots(lane), 0, -1], kind="a list")
    return [raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw) for raw in reply or []]


async def _entry_version(redis: Client, keys: Keys, lane: str, entry_id: str, signer: Signer | None) -> int | None:
    """The version of a snapshot entry (``None``: gone, or not a snapshot of the lane)."""
    entries = await xrange_entries(redis, keys.signals(lane), start=entry_id, end=entry_id, count=1)
    if not entries:
        return None
    item = _decoded(lane, entries[0], signer)
    return item.signal.version if item.signal is not None and item.signal.mode == "snapshot" else None


async def _snapshot_before(redis: Client, keys: Keys, lane: str, version: int,
                           signer: Signer | None) -> tuple[str, int] | None:
    """The newest retained snapshot at or before ``version`` (the oldest one when every retained
    snapshot is newer: older versions are gone), by a binary search over the snapshot list."""
    ids = await _snapshot_ids(redis, keys, lane)
    low, high, found, oldest = 0, len(ids) - 1, None, None
    while low <= high:
        mid = (low + high) // 2
        at = await _entry_version(redis, keys, lane, ids[mid], signer)
        if at is None:
            return None  # trimmed meanwhile, or a list that is not the stream's: read the whole history
        if mid == 0:
            oldest = (ids[0], at)
        if at <= version:
            found, low = (ids[mid], at), mid + 1
        else:
            high = mid - 1
    return found or oldest


async def version_texts(redis: Client, keys: Keys, lane: str, low: int, high: int, *,
                        signer: Signer | None = None) -> dict[int, Materialised]:
    """The rebuilt text of every retained version from ``low`` to ``high`` (both included);
    versions that are not retained (trimmed, or not written yet) are absent.

    Raises:
        VerifyError: the chain that rebuilds them does not check (names the entry).
    """
    if high < low:
        return {}
    try:
        start = await _snapshot_before(redis, keys, lane, low, signer)
        entries = ([] if start is None or high - start[1] >= _MAX_CHAIN else
                   await xrange_entries(redis, keys.signals(lane), start=start[0], count=high - start[1] + 1))
    except CorruptDataError as e:
        raise VerifyError(f"signal stream of {lane}: {e}") from e
    if start is not None and entries:
        signals = [(entry[0], decode_entry(lane, entry, signer=signer)) for entry in entries]
        if signals and signals[0][0] == start[0]:  # the chain checks from its snapshot on, or raises
            return {m.signal.version: m for m in materialise(signals, lane=lane) if low <= m.signal.version <= high}
    items = {m.signal.version: m for m in materialise(await read_signals(redis, keys, lane, signer=signer), lane=lane)}
    return {v: m for v, m in items.items() if low <= v <= high}
