"""A thread's delivery log as a paged timeline of model calls. Read-only.

One :class:`Call` per model call of a window that added working-memory messages (the
records of one window, lane and step): what it added, the version the window held after
it, the text the model could rebuild then, and the same for the window's call before.
The records are the ones ``replay --deliveries`` lists (:meth:`DeliveryLog.read`); the
texts are rebuilt and checked by the delivery log's own fold
(:func:`~signals.streams.deliveries.rebuild_texts`: every snapshot and delta checked
against its cacheKey), and the version a window holds follows
:meth:`~signals.streams.deliveries.DeliveryLog.view_at`'s rule (a snapshot sets it, a
delta of a newer version advances it, a re-delivery of an older one changes nothing).

A page is read newest first (XREVRANGE with COUNT); to rebuild its texts the reader goes
further back only until every window on the page has a snapshot before its first record
there (or starts there, or the log's start is reached), so a log of 10,000 records opens at the cost of its
last chains, not of the whole log. What a window dropped is not in the log (an agent loop
logs what it adds); a re-injection tells it: a fresh snapshot replaces the chain the
window held, whose versions :attr:`Call.dropped` names.

Nothing read is trusted: a record that is not one of this thread's, or a chain that does
not rebuild, raises :class:`~signals.errors.CorruptDataError` naming the entry, as the
log's other readers do; or, asked ``lenient`` (a page that shows the log's verdict, which
names such entries), is left out of the calls (an entry that is not a record) or rebuilds
no text (a record that does not rebuild), each listed in :attr:`TimelinePage.skipped`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from signals.core.models import Delivery
from signals.errors import CorruptDataError
from signals.streams.client import Client
from signals.streams.deliveries import NO_WINDOW, decode_record, rebuild_texts
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.replay import raw_command, xrange_entries

__all__ = ("Call", "TimelinePage", "timeline_page")

#: The most records one round trip reads while going back for the page's snapshots (the
#: first reads twice the page, each next one twice the last).
_BACK_PAGE = 2_000
#: At most this many records are read before the page (a log is bounded at 10,000 by default).
_BACK_LIMIT = 100_000

Record = tuple[str, Delivery]
_Key = tuple[str, str]  # (window or NO_WINDOW, lane)


@dataclass(frozen=True, slots=True)
class Call:
    """One model call that added messages to one window's lane.

    ``version`` and ``text``: what the window held after the call (``text`` is ``None`` when
    the records read do not rebuild it: its chain began before the log's retained records).
    ``previous_version`` / ``previous_text``: the same after the window's call before
    (``None``: the window's first call in the records read). ``dropped``: on a re-injection,
    the versions of the chain the window held before (lowest, highest).
    """

    window: str | None
    lane: str
    step: int
    at: str | None
    records: tuple[Record, ...]
    version: int | None
    text: str | None
    previous_version: int | None
    previous_text: str | None
    dropped: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """Calls newest first; ``older`` is the cursor of the next (older) page, ``None`` at the end."""

    thread_id: str
    calls: tuple[Call, ...]
    older: str | None
    length: int
    read: int = field(default=0)
    """How many records were read to rebuild the page (the page's and those before it)."""
    skipped: tuple[tuple[str, str], ...] = ()
    """``lenient`` only: the entries read that are not records of the thread, or do not
    rebuild, with what is wrong with each (entry id, reason)."""


@dataclass(slots=True)
class _Held:
    version: int
    low: int


def _key(record: Delivery) -> _Key:
    return (record.window or NO_WINDOW, record.lane)


def _call_key(record: Delivery) -> tuple[str, str, int]:
    return (record.window or NO_WINDOW, record.lane, record.step)


def _cut(page: list[Record], next_older: Record | None) -> list[Record]:
    """Leave out of a full page (newest first) the oldest call when the next record belongs to it too."""
    if next_older is None:
        return page
    kept = [r for r in page if _call_key(r[1]) != _call_key(next_older[1])]
    return kept or page


def _covered(records: list[Record], page_ids: set[str]) -> bool:
    """Whether the records read (oldest first, the page's last) rebuild what every window of the
    page held before its first call there: a snapshot of that window before the page, unless
    the window starts on the page (its first record there is its bootstrap snapshot)."""
    snapshot: set[_Key] = set()
    first: dict[_Key, Delivery] = {}
    for entry_id, record in records:
        if entry_id in page_ids:
            first.setdefault(_key(record), record)
        elif record.mode == "snapshot":
            snapshot.add(_key(record))
    return all(key in snapshot or record.reason == "bootstrap" for key, record in first.items())


async def _read(redis: Client, keys: Keys, thread_id: str, end: str, count: int, *,
                skipped: list[tuple[str, str]] | None) -> tuple[list[Record], int, str | None]:
    """Up to ``count`` entries before ``end``, newest first: the records, how many entries were
    read and the oldest one's id (with ``skipped``, an entry that is not a record is put there)."""
    stream = keys.deliveries(thread_id)
    try:
        entries = await xrange_entries(redis, stream, end=end, count=count, newest_first=True)
    except ReplyTooLargeError:
        raise
    except CorruptDataError as e:
        raise CorruptDataError(f"delivery log {stream}: {e}") from e
    records: list[Record] = []
    for entry in entries:
        try:
            records.append((entry[0], decode_record(stream, thread_id, entry)))
        except CorruptDataError as e:
            if skipped is None:
                raise
            skipped.append((entry[0], str(e).partition(": ")[2] or str(e)))
    return records, len(entries), entries[-1][0] if entries else None


async def timeline_page(redis: Client, keys: Keys, thread_id: str, *, before: str | None = None,
                        count: int = 50, lenient: bool = False) -> TimelinePage:
    """The newest ``count`` records (about: whole calls) of the thread's log older than entry ``before``.

    Raises:
        InvalidInputError: ``thread_id`` is not a thread id.
        CorruptDataError: a record that is not one of this thread's, or a chain that does
            not rebuild (names the entry; not when ``lenient``); the log's key is not a stream.
    """
    stream = keys.deliveries(validate_id(thread_id, "thread id"))
    skipped: list[tuple[str, str]] | None = [] if lenient else None
    newest, got, oldest = await _read(redis, keys, thread_id, "+" if before is None else "(" + before, count + 1,
                                      skipped=skipped)
    page = _cut(newest[:count], newest[count] if len(newest) > count else None)
    older = (page[-1][0] if page else oldest) if got > count else None
    length = int(await raw_command(redis, stream, ["XLEN", stream]))
    records = page[::-1]  # oldest first from here on
    page_ids = {entry_id for entry_id, _ in page}
    cursor = page[-1][0] if page else None
    read, step = 0, 2 * count
    while cursor is not None and records and not _covered(records, page_ids) and read < _BACK_LIMIT:
        back, got, cursor = await _read(redis, keys, thread_id, "(" + cursor, step, skipped=skipped)
        records = back[::-1] + records
        read += got
        if got < step:
            break
        step = min(2 * step, _BACK_PAGE)
    texts, _ = rebuild_texts(stream, records, faults=skipped)
    bad = {entry_id for entry_id, _ in skipped or ()}
    calls = [replace(c, text=None) if any(entry_id in bad for entry_id, _ in c.records) else c
             for c in _fold(records, page_ids, texts)]  # a record that does not rebuild shows no text
    return TimelinePage(thread_id, tuple(reversed(calls)), older, length, read + len(page), tuple(skipped or ()))


@dataclass(slots=True)
class _Open:
    """A call being folded: the window's version before it, its records, after it, and what it dropped."""

    before: int | None
    records: list[Record] = field(default_factory=list)
    after: int = 0
    dropped: tuple[int, int] | None = None


def _fold(records: list[Record], page_ids: set[str], texts: dict[tuple[str, int], str]) -> list[Call]:
    """The page's calls, oldest first, with what each window held before and after each."""
    held: dict[_Key, _Held] = {}
    calls: dict[tuple[str, str, int], _Open] = {}
    for entry_id, record in records:
        state = held.get(_key(record))
        before = None if state is None else state.version
        dropped = None
        if record.mode == "snapshot":
            if state is not None and record.reason == "reinject":
                dropped = (state.low, state.version)
            state = held[_key(record)] = _Held(record.version, record.version)
        elif state is None:
            state = held[_key(record)] = _Held(record.version, record.version)  # its chain began before the log
        elif record.version > state.version:  # older: a re-delivery, which changes nothing
            state.version = record.version
        if entry_id not in page_ids:
            continue
        call = calls.setdefault(_call_key(record), _Open(before))
        call.records.append((entry_id, record))
        call.after = state.version
        call.dropped = call.dropped or dropped
    return [Call(window or None, lane, step, call.records[-1][1].at, tuple(call.records), call.after,
                 texts.get((lane, call.after)), call.before,
                 None if call.before is None else texts.get((lane, call.before)), call.dropped)
            for (window, lane, step), call in calls.items()]
