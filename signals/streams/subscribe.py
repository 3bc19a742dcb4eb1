"""Agent-loop side: subscribe to a lane's signals, from its current state, then tail.

:meth:`Subscription.bootstrap` reads the lane's chain from its last retained snapshot
(or, ``from_start``, its oldest: the workers keep at least ``retain_signals`` signals per
lane and trim only at snapshot boundaries, so that is where the retained history
begins, see :mod:`signals.core.retention`) and rebuilds the current text; :meth:`Subscription.poll`
and ``async for`` read what follows with XREAD from the last entry seen, so a reconnect
resumes with no gap and no repeat. Every signal is materialised (deltas applied, the
cacheKey checked); a version gap (the subscriber fell behind the stream's retention)
re-bootstraps from the latest snapshot. Read-only: it never writes and never joins a
consumer group. Cancellation closes it cleanly (anyio). At its first read it looks
once whether a worker serves the lane, and logs ``subscribe.no_worker`` naming the
namespace when none does (see :mod:`signals.streams.served`).

Nothing read is trusted, and a live reader never stops for a bad entry: it delivers
only text it has verified and skips the rest with a warning log event
(``subscribe.entry_refused``, ``subscribe.delta_refused``, ``subscribe.stale_entry``,
``subscribe.not_a_stream``), naming the lane, the entry id and the problem:

* an entry that is not a signal of this lane (no ``e`` field, not JSON, wrong types, a
  ``lane`` field naming another lane, a version outside 1..2**53; with a
  :class:`~signals.core.signing.Signer`, a missing or wrong MAC) is skipped;
* an entry whose version is not above the version held is skipped (versions delivered
  only increase, within one history of the lane: see below);
* a snapshot whose cacheKey (or ``value``) does not match its contents is skipped;
* a delta that does not chain onto the text held (its ``baseVersion`` is not the version
  held, it does not apply, or the result does not match its cacheKey) is dropped, and
  the subscriber then waits for the next snapshot, dropping deltas until one arrives:
  the worker appends a fresh snapshot after any tail it did not write, and every K-th
  signal is a snapshot, so the subscriber recovers at the next one;
* a signal key holding another type (WRONGTYPE) reads as an empty stream.

**After a data loss the subscriber follows the truth.** A lane's history can be lost
under a running subscriber: ``FLUSHALL``, a Redis restarted without persistence, an
operator deleting the lane's keys. The workers then number the lane's versions from 1
again, and a subscriber that only took versions above the one it held would deliver
nothing until the new chain passed it. So the subscriber checks its chain again (it
re-bootstraps, :meth:`Subscription.bootstrap`) whenever what it reads disagrees with
what it holds:

* an entry it verifies has a version at or below the one held (versions go back);
* a delta skips versions, or does not chain onto the text held while the entry of the
  version held is gone from the stream;
* a read finds nothing and the stream's last entry is gone or older than the last entry
  read (the stream was deleted, or recreated with older ids), or the namespace's epoch
  (:func:`signals.streams.namespace.read_epoch`) differs from the one it saw: both are read
  in one round trip after each read that finds nothing.

A re-bootstrap reads the lane's current chain from its last snapshot. When that chain
holds the version held with the same cacheKey, or starts at a snapshot past it, nothing
was lost and only the signals above it are delivered. Otherwise (the chain ends below the
version held, holds another text at it, or the lane is empty) the subscriber **restarts**:
it counts :attr:`Subscription.generation` up, logs ``subscribe.restarted`` (a warning)
and delivers the current chain from its snapshot, whatever its versions: a consumer that
keeps its own view (:class:`~signals.core.window.WindowTracker`) starts that view again
when the generation changes. A replayed old entry (a genuine signal appended again) leaves
the chain unchanged and is skipped; only a rewrite of the snapshot list or stream by a
worker's credentials could make a restart where none happened.

Reads of one subscription are serialised (a lock): two tasks polling it each get distinct
signals.

Replay (:mod:`signals.streams.replay`) reports the same entries as errors instead. What these
checks cannot catch is a forged entry that is well formed and self-consistent (right
lane, next version, matching cacheKey): only a MAC tells it from a worker's signal, so
deployments where anyone but the workers could append to signal streams should give
readers a :class:`~signals.core.signing.Signer` (``replay --verify`` also catches it, against
the stored document).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from redis import exceptions as redis_exc

from signals._log import get_logger
from signals.core.fold import Refused, next_text
from signals.core.lane import is_stream_id
from signals.core.models import Signal
from signals.core.signing import Signer
from signals.errors import CorruptDataError, RedisUnavailableError, VerifyError
from signals.streams._chain_start import chain_start
from signals.streams.backoff import Backoff
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.namespace import EPOCH_FIELD, NamespaceCheck, epoch_of, read_epoch
from signals.streams.redis_errors import is_transient, is_wrong_type
from signals.streams.replay import Materialised, RawEntry, decode_entry, fields_problem, xrange_entries, xread_entries
from signals.streams.served import ServedCheck

__all__ = ("Subscription",)

log = get_logger(__name__)
_PAGE = 2000


class Subscription:
    """A read-only tail of one lane's signal stream.

    Args:
        redis: a redis.asyncio client.
        keys: the deployment's key layout.
        lane: the lane id (see :func:`signals.streams.keys.lane_id`).
        block_ms: how long one blocking read waits in ``async for``.
        count: entries per read.
        reconnect_timeout_s: give up (``RedisUnavailableError``) after Redis has been
            unreachable this long; reconnects before that are silent and gapless.
        signer: when given, only entries with a valid MAC are delivered (see
            :mod:`signals.core.signing`); the others are skipped and logged.

    Attributes:
        version: the last version delivered (0: none). It only increases, except when the
            subscription restarts after a data loss (see :attr:`generation`).
        value: the text after it, or ``None`` while waiting for a snapshot (nothing
            delivered yet, or a delta that did not chain was dropped).
        generation: how many times the subscription restarted from the lane's current
            chain after the lane's history was lost (see the module docstring); the
            signals of a poll that restarted begin with the new chain's snapshot.
    """

    def __init__(self, redis: Client, keys: Keys, lane: str, *, block_ms: int = 5000,
                 count: int = 500, reconnect_timeout_s: float = 60.0, signer: Signer | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.lane = lane
        self.block_ms = block_ms
        self.count = count
        self.reconnect_timeout_s = reconnect_timeout_s
        self.signer = signer
        self.last_id = "0-0"
        self._namespace = NamespaceCheck(redis, keys)  # a count that differs would tail the wrong stream
        self._served = ServedCheck(redis, keys, lane)  # no worker: one warning, not silence (signals.streams.served)
        self.version = 0
        self.value: str | None = None
        self.generation = 0
        self.refused = 0
        """How many entries this subscription has refused (each logged with its reason)."""
        self._key: str | None = None  # the cacheKey of the version held (its text's)
        self._held_id: str | None = None  # the entry id of the version held
        self._epoch: str | None = None  # the namespace's epoch when last read
        self._reading = anyio.Lock()

    async def _checks(self) -> None:
        """Before a read: the namespace's partition count, and (once) whether a worker serves the lane."""
        await self._namespace(record=False)
        await self._served()

    async def bootstrap(self, *, from_start: bool = False) -> list[Materialised]:
        """Read the current chain (last snapshot onwards, or ``from_start`` all retained,
        from the oldest retained snapshot) and rebuild it.

        Returns the signals delivered: those above the version already held when the chain
        read continues it (a re-bootstrap never repeats a version), else, after a data loss
        (see the module docstring), the whole current chain, and :attr:`generation` counts up.
        """
        async with self._reading:
            await self._checks()
            self._epoch = await read_epoch(self.redis, self.keys) or self._epoch
            return await self._bootstrap(from_start=from_start)

    async def _bootstrap(self, *, from_start: bool = False, why: str = "") -> list[Materialised]:
        have, have_key, have_id = self.version, self._key, self._held_id
        start = "-" if from_start else await chain_start(self.redis, self.keys, self.lane, self.signer)
        self.version, self.value, self._key, self._held_id, self.last_id = 0, None, None, None, "0-0"
        items, complete = await self._read_from(start)
        if have == 0:
            return items
        if not complete and self.version < have:  # not a stream: nothing read says the history was lost
            self.version, self.value, self._key, self._held_id = have, None, have_key, have_id
            return []
        if _continues(items, have, have_key):
            return [m for m in items if m.signal.version > have]
        self.generation += 1
        log.warning("subscribe.restarted", lane=self.lane, had=have, now=self.version, generation=self.generation,
                    why=why or "bootstrap", note="the lane's history was lost: delivering its current chain")
        return items

    async def _read_from(self, start: str) -> tuple[list[Materialised], bool]:
        """The chain from ``start`` to the stream's end, and whether the stream could be read."""
        stream = self.keys.signals(self.lane)
        out: list[Materialised] = []
        cursor = start
        while True:
            try:
                entries = await xrange_entries(self.redis, stream, start=cursor, count=_PAGE)
            except CorruptDataError as e:
                log.warning("subscribe.not_a_stream", lane=self.lane, error=str(e))
                return out, False
            for entry in entries:
                signal = self._decode(entry)
                self.last_id = entry[0]
                item = self._apply(entry[0], signal) if signal is not None else None
                if item is not None:
                    out.append(item)
            if len(entries) < _PAGE:
                return out, True
            cursor = "(" + entries[-1][0]

    async def poll(self, block_ms: int | None = None) -> list[Materialised]:
        """Signals after the last one seen, one read of up to ``count`` entries (waiting up
        to ``block_ms`` when given): a tail's step. :meth:`catch_up` reads to the end."""
        async with self._reading:
            await self._checks()
            items, _ = await self._read_page(block_ms)
            return items

    async def catch_up(self, block_ms: int | None = None) -> list[Materialised]:
        """Every signal after the last one seen, however many: reads of ``count`` entries
        until one comes back short (the first waits up to ``block_ms`` when given, the
        others never wait).

        What a model call needs: a backlog longer than one read (more new signals since the
        last call than ``count``, on a lane that retains that many) left the call with an
        older version than the stream's latest. Each read moves past what it returned, so
        this ends once the stream holds nothing newer.
        """
        async with self._reading:
            await self._checks()
            out, more = await self._read_page(block_ms)
            while more:
                items, more = await self._read_page(None)
                out += items
            return out

    async def _read_page(self, block_ms: int | None) -> tuple[list[Materialised], bool]:
        """One read after the last entry seen: the signals delivered, and whether the read
        came back full (more may wait)."""
        try:
            entries = await xread_entries(self.redis, self.keys.signals(self.lane), self.last_id,
                                          count=self.count, block=block_ms)
        except CorruptDataError as e:
            log.warning("subscribe.not_a_stream", lane=self.lane, error=str(e))
            if block_ms:
                await anyio.sleep(block_ms / 1000)  # as long as the read would have waited
            return [], False
        if not entries:
            return await self._check_after_nothing(), False
        out: list[Materialised] = []
        for entry in entries:
            signal = self._decode(entry)
            disagreement = self._disagrees(signal) if signal is not None else None
            if disagreement is not None and signal is not None:
                event, why = disagreement
                log.info(event, lane=self.lane, have=self.version, got=signal.version, entry_id=entry[0], why=why)
                return out + await self._bootstrap(why=why), False
            self.last_id = entry[0]
            chained = self.value is not None
            item = self._apply(entry[0], signal) if signal is not None else None
            if item is not None:
                out.append(item)
            elif chained and self.value is None and not await self._held_entry_kept():
                # a delta did not chain onto the text held, whose entry is gone: the stream was recreated
                return out + await self._bootstrap(why="the entry of the version held is gone"), False
        return out, len(entries) >= self.count

    def _disagrees(self, signal: Signal) -> tuple[str, str] | None:
        """The log event and the reason why ``signal`` (verified on its own) calls for
        re-reading the chain, if it does."""
        if signal.version <= self.version:
            return "subscribe.version_back", "a version at or below the one held"
        if signal.mode == "delta" and self.value is not None and signal.version > self.version + 1:
            return "subscribe.gap", "a version gap (behind the stream's retention)"
        return None

    async def _held_entry_kept(self) -> bool:
        """Whether the entry of the version held is still in the stream. A delta that does
        not chain onto it, while it is kept, is refused and the subscriber waits for the
        next snapshot; when it is gone, the stream was recreated (retention never trims the
        entries of the chain a retained delta belongs to)."""
        if self._held_id is None:
            return True
        try:
            return bool(await xrange_entries(self.redis, self.keys.signals(self.lane),
                                             start=self._held_id, end=self._held_id))
        except CorruptDataError:
            return True

    async def _check_after_nothing(self) -> list[Materialised]:
        """After a read that found nothing, in one round trip: the namespace's epoch and the
        stream's last entry. A new epoch (the namespace was recreated), or a last entry gone
        or older than the last one read (the stream was deleted or recreated), re-reads the
        chain (returns what that delivers). A read that found entries needs neither: their
        versions tell."""
        stream = self.keys.signals(self.lane)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.config(), EPOCH_FIELD)
            pipe.xrevrange(stream, count=1)
            epoch_raw, tail = await pipe.execute(raise_on_error=False)
        for reply in (epoch_raw, tail):  # a key of another type reads as nothing; anything else is raised
            if isinstance(reply, redis_exc.ResponseError) and not is_wrong_type(reply):
                raise reply
        epoch, seen = epoch_of(epoch_raw), self._epoch
        self._epoch = epoch or seen  # none recorded (yet, or since a loss): the stream's checks hold
        if epoch is not None and seen is not None and epoch != seen:
            log.warning("subscribe.epoch_changed", lane=self.lane,
                        note="the namespace was recreated: checking the chain")
            return await self._bootstrap(why="the namespace's epoch changed")
        if self.last_id == "0-0" or isinstance(tail, Exception):  # nothing read yet, or not a stream
            return []
        last = tail[0][0] if tail else None
        if isinstance(last, bytes):
            last = last.decode("ascii", "replace")
        if isinstance(last, str) and is_stream_id(last) and _id_key(last) >= _id_key(self.last_id):
            return []
        return await self._bootstrap(why="the stream's tail is behind the last entry read")

    def _decode(self, entry: RawEntry) -> Signal | None:
        try:
            return decode_entry(self.lane, entry, signer=self.signer)
        except VerifyError as e:
            self.refused += 1
            log.warning("subscribe.entry_refused", lane=self.lane, entry_id=entry[0], problem=str(e))
            return None

    def _refuse_delta(self, entry_id: str, signal: Signal, problem: str) -> None:
        self.refused += 1
        log.warning("subscribe.delta_refused", lane=self.lane, entry_id=entry_id, version=signal.version,
                    have=self.version, problem=problem + "; waiting for the next snapshot")
        self.value = None

    def _apply(self, entry_id: str, signal: Signal) -> Materialised | None:
        """Deliver ``signal`` if it verifies against what is held; ``None`` if refused."""
        if signal.version <= self.version:
            log.warning("subscribe.stale_entry", lane=self.lane, entry_id=entry_id, version=signal.version,
                        have=self.version)
            return None
        if signal.mode == "delta":
            if self.value is None:
                self.refused += 1
                log.warning("subscribe.delta_refused", lane=self.lane, entry_id=entry_id, version=signal.version,
                            have=self.version, problem="waiting for a snapshot")
                return None
            if signal.version != self.version + 1 or signal.base_version not in (None, self.version):
                self._refuse_delta(entry_id, signal, f"applies to version {signal.base_version or signal.version - 1}")
                return None
        # lenient: a link that does not rebuild is refused and skipped, the subscription goes on
        value = next_text(self.value, signal, strict=False)
        if isinstance(value, Refused):
            self._refuse(entry_id, signal, value.reason)
            return None
        problem = fields_problem(signal, value)
        if problem is not None:
            self._refuse(entry_id, signal, problem)
            return None
        self.last_id, self.version, self.value, self._key = entry_id, signal.version, value, signal.cache_key
        self._held_id = entry_id
        return Materialised(entry_id, signal, value)

    def _refuse(self, entry_id: str, signal: Signal, problem: str) -> None:
        """Count and log a signal whose text does not verify; a delta also drops what is held."""
        if signal.mode == "delta":
            self._refuse_delta(entry_id, signal, problem)
        else:
            self.refused += 1
            log.warning("subscribe.entry_refused", lane=self.lane, entry_id=entry_id, version=signal.version,
                        problem=f"snapshot: {problem}")

    async def __aiter__(self) -> AsyncIterator[Materialised]:
        """Tail forever (until cancelled), reconnecting transparently."""
        backoff = Backoff(self.reconnect_timeout_s)
        while True:
            try:
                batch = await self.poll(self.block_ms)
            except redis_exc.RedisError as e:
                if not is_transient(e):  # a refused login above all: waiting does not change the credentials
                    raise
                delay = backoff.next_delay()
                if delay is None:
                    raise RedisUnavailableError(f"subscription to {self.lane}: {e}") from e
                log.warning("subscribe.reconnecting", lane=self.lane, error=repr(e), retry_in_s=delay)
                await anyio.sleep(delay)
                continue
            backoff.ok()
            for item in batch:
                yield item


def _id_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a comparable pair (ids read from Redis, or ``0-0``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _continues(items: list[Materialised], have: int, key: str | None) -> bool:
    """Whether a chain read afresh continues the one held at version ``have`` (cacheKey
    ``key``): it holds that version with that cacheKey, or starts at a snapshot past it
    (the subscriber fell behind the stream's retention). A chain that ends below it, holds
    another text at it or is empty does not: the lane's history was lost."""
    at = [m for m in items if m.signal.version == have]
    if at:
        return at[-1].signal.cache_key == key
    return bool(items) and items[0].signal.version > have
