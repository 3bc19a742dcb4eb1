"""Where a subscriber's chain begins: the lane's last snapshot, named by the workers' hint.

The workers keep the id of each lane's retained snapshots in a list (the last one is the
latest); :func:`chain_start` checks the hint (an entry of the lane that this subscriber
accepts, a snapshot, not a copy of an older one put after newer signals) and answers
where to read from: the hint's entry, or ``-`` (read everything) when it leads nowhere.
Read-only; used by :class:`signals.streams.subscribe.Subscription`.
"""

from __future__ import annotations

from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.core.lane import is_stream_id
from signals.core.signing import Signer
from signals.errors import CorruptDataError, VerifyError
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_wrong_type
from signals.streams.replay import decode_entry, text_problem, xrange_entries

__all__ = ("chain_start",)

log = get_logger("signals.streams.subscribe")
#: How many entries before a snapshot hint's a subscriber looks through for a signal (see
#: :func:`_newer_before`).
_LOOK_BACK = 16


async def _last_snapshot_id(redis: Client, keys: Keys, lane: str) -> str:
    """The last retained snapshot's entry id (a hint the worker keeps), else ``-``."""
    key = keys.snapshots(lane)
    try:
        raw = await redis.execute_command("LINDEX", key, -1, NEVER_DECODE=True)
    except redis_exc.ResponseError as e:
        if not is_wrong_type(e):
            raise
        raw = None
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else None
    if text is None:
        return "-"
    if not is_stream_id(text):  # 64 bits each part: Redis refuses a larger id in XRANGE
        log.warning("subscribe.bad_snapshot_hint", lane=lane, key=key, value=text[:40])
        return "-"
    return text


async def chain_start(redis: Client, keys: Keys, lane: str, signer: Signer | None) -> str:
    """Where the current chain begins: the hint's entry when it is a snapshot this
    subscriber accepts, else ``-`` (the hint led nowhere: read everything).

    With a signer, a hint at a genuine snapshot is also checked against the signal before
    it (:func:`_newer_before`: a replayed copy of an older snapshot). Without one, the hint
    is the one thing here only a worker writes: a well-formed entry before it claiming a
    newer version (anyone who can append can forge one, up to 2**53) must not send the
    reader to the start, where that forgery would outrank every genuine signal after it.

    The hint's entry is checked here, quietly, so that the stream is read once: the read
    that follows counts and logs each refused entry once (a read from the hint, then
    another from ``-`` when no chain came of it, would report those after the hint twice).
    """
    hint = await _last_snapshot_id(redis, keys, lane)
    if hint == "-":
        return hint
    try:
        entries = await xrange_entries(redis, keys.signals(lane), start=hint, end=hint)
        signal = decode_entry(lane, entries[0], signer=signer) if entries else None
    except (CorruptDataError, VerifyError):
        return "-"
    if signal is None or signal.mode != "snapshot" or text_problem(signal, signal.contents) is not None:
        return "-"
    if signer is not None and await _newer_before(redis, keys, lane, signer, hint=hint, version=signal.version):
        log.warning("subscribe.stale_snapshot_hint", lane=lane, entry_id=hint, version=signal.version,
                    note="a signal before it is as new or newer: read from the start")
        return "-"
    return hint


async def _newer_before(redis: Client, keys: Keys, lane: str, signer: Signer | None, *, hint: str,
                        version: int) -> bool:
    """Whether the nearest signal of the lane before the hint's entry (past up to
    :data:`_LOOK_BACK` entries that are not) has ``version`` or a newer one, or none of
    that many is a signal: the hint then names a copy of an older snapshot put after
    newer signals (a genuine entry replayed, MAC and all, and the hint pointed at it),
    which a new subscriber starting there would take for the latest. From the start,
    versions only increase, so the copy is refused as stale."""
    try:
        before = await xrange_entries(redis, keys.signals(lane), end="(" + hint,
                                      count=_LOOK_BACK, newest_first=True)
    except CorruptDataError:
        return True
    for entry in before:
        try:
            previous = decode_entry(lane, entry, signer=signer)
        except VerifyError:
            continue
        return previous.version >= version
    return len(before) == _LOOK_BACK
