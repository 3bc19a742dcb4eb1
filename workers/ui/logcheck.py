"""Whether a thread's delivery log is whole, as the thread page shows it.

The verdict is ``replay --deliveries``'s: :meth:`~signals.streams.deliveries.DeliveryLog.integrity`
(:func:`~signals.streams.delivery_chain.check_chain` over every retained record and the
stream's count of entries ever added), with the UI's signing key and verification keys
when it has them, so a record made without the key is named as such. What is decided here
is only how to show it: ``whole`` (nothing said), ``incomplete`` (the retention trimmed the
oldest, or records carry no chain: the page says it cannot prove the history whole) or
``tampered`` (a cut, a gap, a forged record: what the log holds is not what the model
saw), the records at fault by entry id, and a fingerprint of the stream (XINFO STREAM's
length, count of entries added, first, last and deleted ids) by which a live page tells,
without reading the log, that something removed or added entries since its verdict, and
by which a UI keeps the verdicts it read (:class:`VerdictCache`).

A log holding an entry that is not one of the thread's records, or a record whose text
does not rebuild (which the log's other readers refuse), is ``tampered``, with the entry
and the reason: the page still shows what it can. A log that cannot be read under the
client's reply bound (``max_reply_bytes``) is ``incomplete``: it could not be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import exceptions as redis_exc

from signals.core.signing import Signer
from signals.streams.client import Client
from signals.streams.deliveries import DeliveryLog, LogIntegrity
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.replay import raw_command

__all__ = ("MAX_FINGERPRINT", "Verdict", "VerdictCache", "log_fingerprint", "read_verdict")

#: The longest fingerprint a live page may send back (a longer one is simply not the stream's).
MAX_FINGERPRINT = 200
#: XINFO STREAM fields whose change means entries were added or removed.
_WATCHED = ("length", "entries-added", "last-generated-id", "max-deleted-entry-id", "recorded-first-entry-id")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the thread page says of its log.

    Attributes:
        state: ``whole``, ``incomplete`` or ``tampered`` (see the module header).
        integrity: the check itself (its ``problems`` are shown one line each).
        marks: by entry id, what is wrong with that record (its faults joined).
        fingerprint: the stream's state the verdict was read after (see :func:`log_fingerprint`).
    """

    state: str
    integrity: LogIntegrity
    marks: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    if isinstance(value, list):  # first-entry: [id, fields]
        return _text(value[0]) if value else ""
    return str(value)


async def log_fingerprint(redis: Client, keys: Keys, thread_id: str) -> str:
    """The log's XINFO STREAM figures that any append, trim or deletion changes (``none``:
    no such key). Raises :class:`~signals.errors.CorruptDataError` for a key of another type."""
    stream = keys.deliveries(validate_id(thread_id, "thread id"))
    try:
        reply = await raw_command(redis, stream, ["XINFO", "STREAM", stream])
    except ReplyTooLargeError:  # its first or last entry is over the bound: its length still tells a change
        return f"over-bound:{await redis.xlen(stream)}"
    except redis_exc.ResponseError as e:
        if "no such key" not in str(e).lower():
            raise
        return "none"
    pairs = dict(zip(reply[::2], reply[1::2], strict=False)) if isinstance(reply, list) else {}
    info = {_text(k): v for k, v in pairs.items()}
    return ":".join(_text(info.get(name, "")) for name in (*_WATCHED, "first-entry"))[:MAX_FINGERPRINT]


class VerdictCache:
    """The verdicts a UI read last, by thread and the log's fingerprint: a stream's entries
    never change in place, and any append, trim or deletion changes the fingerprint (it
    names the last id ever generated), so an unchanged fingerprint means the verdict read
    at it still holds. The live pages of one thread then read the whole log once per
    change, not once each. Holds at most ``size`` verdicts, dropping the oldest."""

    def __init__(self, size: int = 64) -> None:
        """An empty cache of at most ``size`` verdicts."""
        self.size = size
        self._kept: dict[tuple[str, str], Verdict] = {}

    def get(self, thread_id: str, fingerprint: str) -> Verdict | None:
        """The verdict read at ``fingerprint``, if kept."""
        return self._kept.get((thread_id, fingerprint))

    def put(self, thread_id: str, verdict: Verdict) -> None:
        """Keep ``verdict`` (read at its fingerprint)."""
        self._kept.pop((thread_id, verdict.fingerprint), None)
        self._kept[thread_id, verdict.fingerprint] = verdict
        while len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]


def _lasting(fingerprint: str) -> bool:
    """Whether a fingerprint names one state of the log (no key, or only its length, does not)."""
    return fingerprint != "none" and not fingerprint.startswith("over-bound:")


async def read_verdict(redis: Client, keys: Keys, thread_id: str, signer: Signer | None = None, *,
                       cache: VerdictCache | None = None) -> Verdict:
    """The log's verdict, checked as ``replay --deliveries`` checks it (with ``signer``'s keys);
    with ``cache``, the one kept there at the log's fingerprint, else read and kept."""
    fingerprint = await log_fingerprint(redis, keys, thread_id)  # before the read: a change after it shows
    cache = cache if _lasting(fingerprint) else None
    if cache is not None and (kept := cache.get(thread_id, fingerprint)) is not None:
        return kept
    log = DeliveryLog(redis, keys, key=signer.key if signer else None,
                      verify_keys=signer.verify_keys if signer else ())
    try:
        integrity = await log.integrity(thread_id)
    except ReplyTooLargeError as e:  # not read, so not checked: said, not a failed page
        integrity = LogIntegrity(complete=False, tampered=False, problems=(
            f"the log could not be read to be checked: {e}; an entry (any agent user may append one) is "
            "larger than this UI reads (WM_SIGNALS_MAX_REPLY_BYTES)",))
    marks: dict[str, str] = {}
    for entry_id, note in integrity.flagged:
        marks[entry_id] = f"{marks[entry_id]}; {note}" if entry_id in marks else note
    state = "whole" if integrity.complete else "tampered" if integrity.tampered else "incomplete"
    verdict = Verdict(state, integrity, marks, fingerprint)
    if cache is not None:
        cache.put(thread_id, verdict)
    return verdict
