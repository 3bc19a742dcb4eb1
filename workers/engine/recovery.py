"""The worker's recovery paths: its own pending entries after a restart, entries a dead
consumer left (XAUTOCLAIM), entries too large to read, and lanes whose write event is
gone from the stream or whose signal stream does not end at their tracked tail
(reconciled from their documents).

Each path hands what it finds to the consumer's one processing pipeline
(:class:`~workers.engine.consumer.Consumer` mixes this in), so a recovered entry is
planned, committed and dead-lettered exactly as a freshly read one.
"""

from __future__ import annotations

from typing import Any

import structlog
from redis import exceptions as redis_exc

from signals.streams.keys import GROUP
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.scripts import ServerScript
from workers.engine.commit import BatchStats
from workers.engine.counters import METRICS
from workers.engine.dead_letters import DeadLetters
from workers.engine.events import text
from workers.engine.lane_state import Pending
from workers.engine.options import ConsumerOptions
from workers.engine.reader import GroupReader, RawEntry
from workers.engine.reconcile import Scanner, catch_up_entry

__all__ = ("Recovery",)

log = structlog.get_logger(__name__)


class Recovery(GroupReader):
    """The recovery half of the consumer; the consumer provides what is declared here."""

    options: ConsumerOptions
    stats: BatchStats
    _dead: DeadLetters
    _stream_partition: dict[str, int]
    _claim: ServerScript
    _scanner: Scanner | None

    async def process(self, raw: list[RawEntry], *, prefetch: Any = None) -> BatchStats:
        raise NotImplementedError

    async def _passes(self, entries: list[Pending], stats: BatchStats, prefetch: Any) -> None:
        raise NotImplementedError

    async def drain_pending(self, streams: list[str] | None = None) -> BatchStats:
        """Process this consumer's own pending entries once (after a restart or reconnect,
        or after a read whose reply was over the client's ``max_reply_bytes``).

        A reply over the bound is read again in smaller reads (see ``read_count``); an
        entry over it alone (a writer's 100 MB XADD) is dead-lettered by its id, unread:
        what a writer puts in a write stream never costs the process more memory than the
        bound, and never stops it.
        """
        total = BatchStats()
        cursors: dict[str, str] = dict.fromkeys(streams or self.keys.all_writes(), "0")
        while cursors:
            before = self.read_count
            try:
                raw = await self.read_batch(cursors=cursors)
            except ReplyTooLargeError as e:
                if before > 1:  # read again, in smaller reads
                    continue
                for stream in list(cursors):  # one entry per stream is still too much: a stream at a time
                    cursors[stream] = await self._drain_alone(stream, cursors[stream], total, e)
                cursors = {stream: cursor for stream, cursor in cursors.items() if cursor}
                continue
            seen = {stream: entry_id for stream, entry_id, _ in raw}
            cursors = {stream: seen[stream] for stream in cursors if stream in seen}
            if raw:
                total.add(await self.process(raw))
        return total

    async def _drain_alone(self, stream: str, cursor: str, total: BatchStats, error: ReplyTooLargeError) -> str:
        """Read ``stream``'s next pending entry after ``cursor`` alone; one over the bound
        is dead-lettered by its id, unread. Returns the new cursor ('' when none is left)."""
        try:
            raw = await self.read_batch(cursors={stream: cursor}, one=True)
        except ReplyTooLargeError as e:  # that one entry, the first pending after the cursor
            entry_id = await self.next_pending(stream, cursor)
            if entry_id is None:
                return ""
            total.dead_letters += await self._oversized(stream, entry_id, e)
            return entry_id
        if not raw:
            return ""
        total.add(await self.process(raw))
        return raw[-1][1]

    async def _oversized(self, stream: str, entry_id: str, error: ReplyTooLargeError) -> int:
        """Dead-letter a write-stream entry that could not be read (its reply was over the
        bound); its fields are not kept (they were never read)."""
        return int(await self._dead.send(self._stream_partition[stream], entry_id, {},
                                         f"poison: the entry is {text(error)}", 1))

    async def reclaim(self) -> BatchStats:
        """XAUTOCLAIM entries idle longer than ``claim_idle_ms`` from any consumer, and process them.

        The claim takes ids only (``JUSTID``), and the entries are read by id within the
        client's reply bound (see :meth:`_read_ids`): a dead consumer's pending entry of
        any size is dead-lettered, not read whole by every worker that claims it."""
        total = BatchStats()
        lost: list[str] = []
        for stream in await self.readable(self.keys.all_writes()):
            try:
                await self._reclaim_stream(stream, total)
            except redis_exc.ResponseError as e:
                if "NOGROUP" not in str(e):
                    raise
                lost.append(stream)  # the group (or the stream) was destroyed under us
        if lost:
            log.warning("worker.group_recreated", streams=lost, note="the consumer group was lost: created again")
            await self.ensure_groups()
        return total

    async def _reclaim_stream(self, stream: str, total: BatchStats) -> None:
        """Claim and process ``stream``'s entries idle past ``claim_idle_ms`` (NOGROUP: the caller's)."""
        start = "0-0"
        while True:
            reply = await self._claim(keys=[stream], args=[GROUP, self.name, self.options.claim_idle_ms, start,
                                                           self.options.batch])
            start, claimed = str(reply[0]), [str(entry_id) for entry_id in reply[1]]
            if claimed:
                log.info("worker.reclaimed", stream=stream, count=len(claimed))
                METRICS.add("reclaimed_entries", len(claimed))
                await self._process_ids(stream, claimed, total)
            if start in ("0-0", "0"):
                break

    async def reconcile(self) -> BatchStats:
        """Signal lanes whose document is ahead of their signals and whose write event is
        gone from the write stream (trimmed by a role that may append), and re-snapshot
        lanes whose signal stream does not end at their tracking's tail (someone else
        appended: see :mod:`workers.engine.reconcile`), a page of each partition's lanes per
        call, through the commit path: a catch-up of each document, compare-and-set on its
        tracking, the tail checked by the commit script."""
        if self._scanner is None:
            partitions = [p for p in range(self.keys.partitions) if p % self.shard[1] == self.shard[0]]
            self._scanner = Scanner(self.redis, self.keys, partitions)
        found = await self._scanner.next_page()
        if not found:
            return BatchStats()
        entries = [await catch_up_entry(self.redis, self.keys, lane) for lane in found]
        orphans = [o.lane for o in found if not o.foreign_tail]
        foreign = [(o.lane, o.tail, o.last) for o in found if o.foreign_tail]
        if orphans:
            log.warning("worker.lanes_reconciled", lanes=orphans[:20], count=len(orphans),
                        note="document ahead of its signals with its write event gone from the stream")
        if foreign:
            log.warning("worker.foreign_tails", lanes=foreign[:20], count=len(foreign),
                        note="signal stream not ending at the tracked tail: re-snapshotted past it")
        METRICS.add("reconciled_lanes", len(found))
        stats = BatchStats()
        await self._passes(entries, stats, None)
        self.stats.add(stats)
        left = await self._scanner.still_orphaned(found)
        if left:  # a fault of the lane: not tried again until its document moves
            log.warning("worker.reconcile_failed", lanes=[o.lane for o in left][:20], count=len(left))
            self._scanner.skip(left)
        return stats

    async def _process_ids(self, stream: str, ids: list[str], total: BatchStats) -> None:
        """Read the entries of ``stream`` with these ids (fields ``None``: deleted) and
        process them, in halves while the reads are over the bound (each half processed as
        soon as it is read, so that no more than one bounded read is held at a time); one
        alone over it is dead-lettered."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for entry_id in ids:
                    pipe.xrange(stream, entry_id, entry_id)
                replies = await pipe.execute()
        except ReplyTooLargeError as e:
            if len(ids) == 1:
                total.dead_letters += await self._oversized(stream, ids[0], e)
                return
            half = len(ids) // 2
            await self._process_ids(stream, ids[:half], total)
            await self._process_ids(stream, ids[half:], total)
            return
        total.add(await self.process([(stream, entry_id, found[0][1] if found else None)
                                      for entry_id, found in zip(ids, replies, strict=True)]))
