"""Read a lane's signal history back, rebuild each version, verify the chain. Read-only.

:func:`materialise` walks signals in order: a snapshot sets the text, a delta applies to
the text of the version it names (``baseVersion``, or the previous signal); each rebuilt
text must hash to the signal's cacheKey. The first failure raises
:class:`~signals.errors.VerifyError` naming the entry. It never joins a consumer group
and never writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import msgspec

from signals._util import Client, xrange
from signals.cachekey import cache_key
from signals.codec import FIELD, decode_signal
from signals.errors import InvalidInputError, VerifyError
from signals.keys import Keys
from signals.models import Signal
from signals.processor import apply_delta

__all__ = ("Materialised", "iter_signals", "materialise", "read_signals")


@dataclass(frozen=True, slots=True)
class Materialised:
    """A signal with the full text the model can rebuild after it."""

    entry_id: str
    signal: Signal
    value: str


async def iter_signals(
    redis: Client, keys: Keys, lane: str, *, start: str = "-", end: str = "+", page: int = 2000
) -> AsyncIterator[tuple[str, Signal]]:
    """Yield ``(entry id, signal)`` of a lane's stream in order, paging with XRANGE."""
    stream = keys.signals(lane)
    cursor = start
    while True:
        entries = await xrange(redis, stream, start=cursor, end=end, count=page)
        for entry_id, fields in entries:
            try:
                yield entry_id, decode_signal(fields[FIELD])
            except (KeyError, msgspec.DecodeError, msgspec.ValidationError) as e:
                raise VerifyError(f"entry {entry_id} of {lane}: not a signal: {e}") from e
        if len(entries) < page:
            return
        cursor = "(" + entries[-1][0]


async def read_signals(redis: Client, keys: Keys, lane: str) -> list[tuple[str, Signal]]:
    """The lane's whole retained history."""
    return [item async for item in iter_signals(redis, keys, lane)]


def materialise(
    signals: Iterable[tuple[str, Signal]], *, verify: bool = True
) -> Iterator[Materialised]:
    """Rebuild the text after each signal (from the first snapshot on).

    Raises:
        VerifyError: a delta before any snapshot, a version gap or repeat, a delta that
            does not apply, or (with ``verify``) a cacheKey that does not match the text.
    """
    previous: Signal | None = None
    text: str | None = None
    for entry_id, signal in signals:
        where = f"entry {entry_id} (version {signal.version}, {signal.mode})"
        if previous is not None and signal.version != previous.version + 1:
            raise VerifyError(f"{where}: follows version {previous.version}")
        if signal.mode == "snapshot":
            value = signal.contents
        else:
            if previous is None or text is None:
                raise VerifyError(f"{where}: a delta with no snapshot before it")
            if signal.base_version is not None and signal.base_version != previous.version:
                raise VerifyError(f"{where}: applies to version {signal.base_version}, "
                                  f"not the previous {previous.version}")
            try:
                value = apply_delta(text, signal.contents, signal.attributes.patch)
            except InvalidInputError as e:
                raise VerifyError(f"{where}: delta does not apply: {e}") from e
        if verify and cache_key(signal.attributes.format, value) != signal.cache_key:
            raise VerifyError(f"{where}: cacheKey does not match the rebuilt text")
        if verify and signal.value is not None and signal.value != value:
            raise VerifyError(f"{where}: value differs from the rebuilt text")
        previous, text = signal, value
        yield Materialised(entry_id, signal, value)
