"""The delivery log: what an agent loop put into its model's window, step by step.

Per thread, an append-only Redis stream of :class:`~signals.core.models.Delivery` records
(step, lane version, mode, reason, contents), bounded by ``retention`` entries
(approximate trimming). :meth:`DeliveryLog.view_at` answers "what working memory could
the model rebuild at step N" from the log: the last snapshot delivered at or before N
plus the deltas delivered after it, up to N. A coalesced catch-up delta records the
version it applies to (``baseVersion``) and carries every version after it up to its own.

Nothing read back is trusted: an entry that is not a delivery record of this thread (no
``e`` field, not UTF-8, not JSON, wrong types, another thread's id, a version outside
1..2**53, a base version not below the version, a lane that is not a lane id, a
snapshot with a patch kind or a base version, a delta without a patch kind), or a chain
that does not rebuild (a delta that does not apply, a text that does not match its
cacheKey), raises :class:`~signals.errors.CorruptDataError` naming the stream and the
entry id. The log is
evidence of what a model saw: a reader is told that it is tampered with, not handed a
guess (the CLI maps it to exit 2).

One log per thread id; each record names its window (``window``: one agent process's
tracker, :attr:`~signals.core.window.WindowTracker.window_id`) and that window's step (its
model calls). A process that starts on the thread numbers its steps after the log's last
record (:meth:`DeliveryLog.last_step`), so successive processes' records usually follow
one another in step order; but a window's steps that added nothing are not in the log,
and two processes can overlap (a rolling redeploy, or two agents on one thread), so a step
number alone may belong to two windows. ``view_at`` answers for one window: the one
asked for, else the window of the newest record at or before the step. Records that name
no window (the field is optional) count as one window.

A snapshot record with reason ``reset`` marks a lane whose history was lost and started
again (:meth:`~signals.core.window.WindowTracker.restart`): its versions may be lower than
the records before it, and nothing the window held before it counts for what follows.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.core._time import now_iso
from signals.core.codec import FIELD, decode_delivery, encode_json
from signals.core.fold import next_text
from signals.core.models import Delivery
from signals.core.window import MAX_RESUME_STEP, WINDOW_ID, StepResult
from signals.core.wire import MAX_VERSION, lane_owner_id, lane_scope
from signals.errors import CorruptDataError, InvalidInputError, RedisBusyError
from signals.streams.client import Client
from signals.streams.delivery_chain import ChainState, LogIntegrity, check_chain, link
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import ReplyTooLargeError, ids_exhausted, is_wrong_type
from signals.streams.replay import RawEntry, xrange_entries

__all__ = ("NO_WINDOW", "DeliveryLog", "LogIntegrity", "ModelView", "decode_record", "rebuild_texts")

#: ``view_at(..., window=NO_WINDOW)``: the records that name no window (the field is
#: optional). No window is named so (a name has at least one character).
NO_WINDOW = ""

log = get_logger(__name__)

#: :meth:`DeliveryLog.last_step` pages back this many entries at a time past junk.
_LAST_STEP_PAGE = 16


@dataclass(frozen=True, slots=True)
class ModelView:
    """The working memory the model could rebuild at a step."""

    step: int
    version: int
    text: str
    deliveries: tuple[Delivery, ...]
    window: str | None = None


class DeliveryLog:
    """Append and read a thread's delivery log."""

    def __init__(self, redis: Client, keys: Keys, *, retention: int = 10_000, key: bytes | None = None,
                 verify_keys: tuple[bytes, ...] = ()) -> None:
        """``key``: the signing key, when there is one: each record's chain is then an HMAC
        no one without it can make (see :mod:`signals.streams.delivery_chain`);
        ``verify_keys``: the other keys a chain may have been made with (a rotation)."""
        self.redis = redis
        self.keys = keys
        self.retention = retention
        self.key = key
        self.verify_keys = verify_keys
        self._chain = ChainState(key)

    async def record(self, thread_id: str, lane: str, result: StepResult) -> list[Delivery]:
        """Append the step's additions (nothing when it added nothing).

        Raises:
            CorruptDataError: the log's key holds something other than a stream, or a stream
                that takes no new entry (names it).
            RedisBusyError: Redis is out of memory.
        """
        if not result.add:
            return []
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        now = now_iso()
        before = dict(self._chain.windows)  # the chain moves on only once the records are in
        records = [link(self._chain, inj.delivery(thread_id=thread_id, lane=lane, at=now, window=result.window))
                   for inj in result.add]
        try:
            await self._append(stream, records)
        except BaseException:
            self._chain.windows = before
            raise
        return records

    async def _append(self, stream: str, records: list[Delivery]) -> None:
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for record in records:
                    pipe.xadd(stream, {FIELD: encode_json(record)}, maxlen=self.retention, approximate=True)
                await pipe.execute()
        except redis_exc.OutOfMemoryError as e:
            raise RedisBusyError(f"delivery log {stream}: Redis is out of memory: {e}") from e
        except redis_exc.ResponseError as e:  # the pipeline names the command before the reply
            if ids_exhausted(e):  # an entry with the largest id, added by hand
                raise CorruptDataError(
                    f"delivery log {stream} has run out of stream ids (an entry with the largest id was added by "
                    "hand; any agent user may append to a thread's log): nothing was logged; an operator must "
                    "delete the key (the log starts again empty)") from e
            if not is_wrong_type(e):
                raise
            raise CorruptDataError(f"delivery log {stream} is not a stream") from e

    async def integrity(self, thread_id: str) -> LogIntegrity:
        """Whether the thread's log is whole: its records' chains and the stream's count of
        entries ever added (see :mod:`signals.streams.delivery_chain`), and every record's
        text (:func:`rebuild_texts`): an entry that is not a record of this thread, or does
        not rebuild, makes the log tampered, named in ``problems`` and ``flagged``.

        Raises:
            CorruptDataError: the log's key holds something other than a stream.
        """
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        foreign: list[tuple[str, str]] = []
        records = await self._entries(thread_id, faults=foreign)
        faults = list(foreign)
        rebuild_texts(stream, records, faults=faults)
        added: int | None = 0  # no key: nothing was ever added
        try:
            info = await self.redis.xinfo_stream(stream)
        except redis_exc.ResponseError as e:
            if "no such key" not in str(e).lower():
                raise
        else:
            value = info.get("entries-added") if isinstance(info, dict) else None
            added = value if isinstance(value, int) else None
        found = check_chain(records, entries_added=added, retention=self.retention, key=self.key,
                            verify_keys=self.verify_keys, others=len(foreign))
        if not faults:
            return found
        problems = tuple(f"entry {entry_id}: {why}" for entry_id, why in faults)
        return LogIntegrity(False, True, (*problems, *found.problems), (*faults, *found.flagged))

    async def read(self, thread_id: str, *, from_step: int = 0, to_step: int | None = None) -> list[Delivery]:
        """The thread's retained deliveries in order, optionally within a step range, each
        checked as :meth:`view_at` checks them (see :func:`rebuild_texts`).

        Raises:
            CorruptDataError: an entry is not a delivery record of this thread, or its text
                does not rebuild or does not match its cacheKey (names it).
        """
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        records = await self._entries(thread_id, to_step=to_step)
        rebuild_texts(stream, records)
        return [record for _, record in records if record.step >= from_step]

    async def last_step(self, thread_id: str) -> int:
        """The step of the thread's newest delivery record (0 when it has none): an agent
        process that starts on the thread numbers its steps after it (see
        :meth:`signals.core.window.WindowTracker.resume`), so that its records follow the
        earlier process's in step order.

        Reads the newest entry, and pages further back only past entries that are not
        records of this thread (or name a step past
        :data:`~signals.core.window.MAX_RESUME_STEP`), up to ``retention`` of them: they are
        passed over, with one warning saying how many (the log's readers still refuse them:
        they are evidence of tampering, not a reason for the agent not to start).

        Raises:
            CorruptDataError: the log's key holds something other than a stream (names it).
        """
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        end, count, passed, problem = "+", 1, 0, ""
        try:
            while passed < self.retention and (
                    entries := await xrange_entries(self.redis, stream, end=end, count=count, newest_first=True)):
                for entry in entries:
                    try:
                        step = decode_record(stream, thread_id, entry).step
                    except CorruptDataError as e:
                        passed, problem = passed + 1, problem or str(e)
                        continue
                    if step <= MAX_RESUME_STEP:
                        return step
                    passed += 1
                    problem = problem or f"entry {entry[0]}: step {step} is past any a window reaches"
                end, count = "(" + entries[-1][0], _LAST_STEP_PAGE
            return 0
        finally:
            if passed:  # one line for the lot: a log full of junk must not flood the agent's log
                log.warning("deliveries.bad_records", stream=stream, passed_over=passed, first_problem=problem[:300])

    async def _entries(self, thread_id: str, from_step: int = 0, to_step: int | None = None, *,
                       faults: list[tuple[str, str]] | None = None) -> list[tuple[str, Delivery]]:
        """The log's records; with ``faults``, an entry that is not one is added there and left out."""
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        out: list[tuple[str, Delivery]] = []
        cursor, count = "-", 1000
        while True:
            try:
                entries = await xrange_entries(self.redis, stream, start=cursor, count=count)
            except ReplyTooLargeError:  # large records (a bounded client): fewer a read, down to one
                if count == 1:
                    raise
                count = max(1, count // 4)
                continue
            for entry in entries:
                try:
                    record = decode_record(stream, thread_id, entry)
                except CorruptDataError as e:
                    _refuse(faults, entry[0], e)
                    continue
                if record.step >= from_step and (to_step is None or record.step <= to_step):
                    out.append((entry[0], record))
            if len(entries) < count:
                return out
            cursor = "(" + entries[-1][0]

    async def view_at(self, thread_id: str, step: int, *, window: str | None = None) -> ModelView | None:
        """What the model of ``window`` could rebuild at its ``step`` (``None`` before any
        delivery of that window). Without ``window``: the window of the newest record at or
        before ``step`` (see the module docstring; ``replay --deliveries`` shows each
        record's window); :data:`NO_WINDOW` asks for the records that name none.

        The last snapshot delivered at or before ``step``, then the deltas after it in
        order; a delta of a version already applied is a re-delivery (the window had
        lost its copy) and changes nothing. A coalesced delta (``base_version`` set)
        applies to the text at its base version and carries every version up to its
        own: its base is the version reached so far, or an earlier one this window was
        delivered since the last snapshot or before it (it kept an older chain and caught
        up from there). Every text is checked against its cacheKey.

        Raises:
            CorruptDataError: a bad entry, a version gap, a delta that does not apply or
                a text that does not match its cacheKey (names the entry).
        """
        stream = self.keys.deliveries(validate_id(thread_id, "thread id"))
        if window not in (None, NO_WINDOW) and not (isinstance(window, str) and WINDOW_ID.fullmatch(window)):
            raise InvalidInputError(f"window is a window name (as replay --deliveries shows it), not {window!r}")
        records = await self._entries(thread_id, to_step=step)
        texts, checked = rebuild_texts(stream, records)  # every record checked: the texts are the lanes'
        if window is None:
            if not records:
                return None
            window = records[-1][1].window or NO_WINDOW
        records = [(entry_id, r) for entry_id, r in records if (r.window or NO_WINDOW) == window]
        if records:  # a window delivers one lane (records naming no window: the newest one's)
            lane = records[-1][1].lane
            records = [(entry_id, r) for entry_id, r in records if r.lane == lane]
        snapshot = max((i for i, (_, r) in enumerate(records) if r.mode == "snapshot"), default=None)
        if snapshot is None:
            return None
        chain = records[snapshot:]
        since = max((i for i, (_, r) in enumerate(records[: snapshot + 1]) if r.reason == "reset"), default=0)
        held = {r.version for _, r in records[since: snapshot + 1]}  # what this window's model could rebuild
        version = chain[0][1].version
        for entry_id, record in chain[1:]:
            if entry_id not in checked:  # after a snapshot every record can be checked
                raise _unknown_base(stream, entry_id, record)
            if record.version <= version:  # a re-delivery (checked like every record)
                continue
            base = _base(record)
            if not (base == version or (record.base_version is not None and base < version and base in held)):
                raise CorruptDataError(f"delivery log {stream} entry {entry_id}: delta of version {record.version} "
                                       f"(applies to {base}) follows version {version}")
            version = record.version
            held.add(version)
        return ModelView(step, version, texts[chain[0][1].lane, version], tuple(r for _, r in chain), window or None)


def _base(record: Delivery) -> int:
    """The version a delta applies to (a coalesced one names it)."""
    return record.version - 1 if record.base_version is None else record.base_version


def _unknown_base(stream: str, entry_id: str, record: Delivery) -> CorruptDataError:
    return CorruptDataError(f"delivery log {stream} entry {entry_id}: delta of version {record.version} "
                            f"applies to version {_base(record)}, which no earlier record rebuilds")


def _refuse(faults: list[tuple[str, str]] | None, entry_id: str, error: CorruptDataError,
            cause: Exception | None = None) -> None:
    """Raise ``error``, or with ``faults`` add the entry there (without the stream and id the error names)."""
    if faults is None:
        raise error from cause
    faults.append((entry_id, str(error).partition(": ")[2] or str(error)))


def rebuild_texts(stream: str, records: list[tuple[str, Delivery]], *,
                  faults: list[tuple[str, str]] | None = None) -> tuple[dict[tuple[str, int], str], set[str]]:
    """Check every record of a log (oldest first); return the texts they rebuild, by lane
    and version (one thread's log may hold the windows of several lanes: a profile agent
    and a plan agent), and the ids of the records checked. A snapshot's text must match its
    cacheKey; a delta must apply to the text of the version it names and give its
    cacheKey's text, re-deliveries included (one of a version already seen taken unchecked
    would let a forged record sit in the chain). A delta whose base no earlier
    record rebuilds is refused, unless that base is older than the first retained snapshot
    of the record's own window, or its window has none (retention trimmed the records that
    rebuild it, or the window kept a chain from before them; another window's snapshots
    say nothing of what this one held): it cannot be checked, rebuilds nothing, and is left
    out of the ids. With ``faults``, such a record is added there (entry id, what is wrong)
    and left out instead.

    Raises:
        CorruptDataError: a text that does not match its cacheKey, a delta that does not
            apply or whose base is unknown (names the entry; not with ``faults``).
    """
    texts: dict[tuple[str, int], str] = {}  # by lane and version: one thread's log may hold several lanes
    checked: set[str] = set()
    first: dict[tuple[str, str | None], int] = {}  # per lane and window: its first retained snapshot's version
    for _, record in records:
        if record.mode == "snapshot":
            first.setdefault((record.lane, record.window), record.version)
    for entry_id, record in records:
        if record.mode == "snapshot":
            prior = None
        elif (record.lane, base := _base(record)) in texts:
            prior = texts[record.lane, base]
        elif (where := (record.lane, record.window)) not in first or base < first[where]:
            continue
        else:
            _refuse(faults, entry_id, _unknown_base(stream, entry_id, record))
            continue
        try:  # strict: the log is evidence, a record that does not rebuild is corrupt
            text = next_text(prior, record, strict=True)
        except CorruptDataError as e:
            _refuse(faults, entry_id, CorruptDataError(f"delivery log {stream} entry {entry_id}: {e}"), e)
            continue
        texts[record.lane, record.version] = text
        checked.add(entry_id)
    return texts, checked


def decode_record(stream: str, thread_id: str, entry: RawEntry) -> Delivery:
    """One delivery-log entry, checked; ``CorruptDataError`` names the entry and the problem."""
    entry_id, fields = entry
    where = f"delivery log {stream} entry {entry_id}"
    if fields is None:
        raise CorruptDataError(f"{where}: a field is not UTF-8 text")
    if FIELD not in fields:
        raise CorruptDataError(f"{where}: no {FIELD!r} field")
    try:
        record = decode_delivery(fields[FIELD])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError) as e:
        raise CorruptDataError(f"{where}: not a delivery record: {str(e)[:200]}") from e
    _check_record(where, thread_id, record)
    return record


def _check_record(where: str, thread_id: str, record: Delivery) -> None:
    """What a decoded record must be to be one of this thread's (``CorruptDataError`` says what it is not)."""
    if record.thread_id != thread_id:
        raise CorruptDataError(f"{where}: threadId {record.thread_id[:80]!r} is not this log's thread")
    if record.window is not None and not WINDOW_ID.fullmatch(record.window):
        raise CorruptDataError(f"{where}: window {record.window[:80]!r} is not a window name")
    if not 0 <= record.step <= MAX_VERSION or not 1 <= record.version <= MAX_VERSION:
        raise CorruptDataError(f"{where}: step {str(record.step)[:40]} or version {str(record.version)[:40]} "
                               "is out of range")
    if (record.mode == "delta") != (record.attributes.patch is not None) or \
            (record.mode == "snapshot" and record.base_version is not None):
        raise CorruptDataError(f"{where}: a {record.mode} record with patch {record.attributes.patch!r} and "
                               f"baseVersion {str(record.base_version)[:40]}: a snapshot has neither, "
                               "a delta has a patch kind")
    if record.base_version is not None and not 0 < record.base_version < record.version:
        raise CorruptDataError(f"{where}: baseVersion {str(record.base_version)[:40]} is not a version "
                               f"below {record.version}")
    if lane_scope(record.lane) != record.attributes.scope:
        raise CorruptDataError(f"{where}: lane {record.lane[:80]!r} does not fit scope {record.attributes.scope!r}")
    try:  # a lane is its prefix and an id (no control characters: a reader prints it)
        validate_id(lane_owner_id(record.lane), "lane id")
    except InvalidInputError as e:
        raise CorruptDataError(f"{where}: lane {record.lane[:80]!r} is not a lane id") from e

