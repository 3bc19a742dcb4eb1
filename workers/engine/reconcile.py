"""Lanes whose signals do not say what their document does, with nothing left to bring the
read loop to them: reconciled from their documents, a page of lanes per maintenance pass.

Orphaned lanes: the document is the truth; the write stream is only its wake-up. A role
that may append to a write stream may also trim it (``XADD ... MAXLEN 0``: Redis ACLs
cannot refuse an argument), and the events it removes would never be read: their lanes'
latest versions would never be signalled. :func:`orphaned_lanes` finds such lanes: the
document's version is past the tracking's processed write version (``wv``) and the
document's own write event (its ``eid``) is not in the partition's write stream. An event
still there (unread, or pending) is left to the read loop and the reclaim.

Foreign tails: a lane signalled up to its document whose signal stream does not end at
the signal its tracking names (``tail``): someone else appended to it (a junk entry, or a
well-formed forged snapshot: the lane's next version with a matching cacheKey, or version
2**53), or deleted or replaced its end. The commit script's tail check finds that at the
lane's next write, and the lane is re-snapshotted past the foreign tail; an idle lane has
no next write, and a reader that starts meanwhile would take the forgery for the latest
memory. The scan reads each lane's tracking ``tail`` and its stream's last entry id
(``XREVRANGE ... COUNT 1``) with the document head and ``wv`` it reads anyway, in the
same round trip; a lane whose stream ends at its tail costs nothing more than those reads.

The worker brings each such lane through the same commit path as any write (see
:meth:`workers.engine.consumer.Consumer.reconcile`): a catch-up request for the document's
own text (:func:`catch_up_entry`). For an orphaned lane the catch-up signals the
document's version. For a foreign tail the document's version is processed already: the
commit appends nothing, but its tail check (atomic with the commit) finds the stream still
ending elsewhere and answers ``resnap``; the lane is then planned again as
:func:`workers.engine.settle.settle` plans any ``resnap``: a fresh snapshot of the document's
text, numbered past the foreign tail (within ``_MAX_JUMP``: see
:mod:`workers.engine.lane_state`), listed in the snapshot list. Each commit is a
compare-and-set on the tracking, so no version is signalled twice whatever another worker
does meanwhile, and a lane that moved between the scan and the commit (another worker's
commit, a compaction) is left as it is: the scan is a hint, the commit's checks decide.

The lanes are scanned a page at a time (``SSCAN`` of each partition's lanes set, a cursor
kept between passes), so a pass is bounded however many lanes there are. A lane whose
reconciliation did not take (a fault of the lane) is left until its document moves.
:func:`orphaned_lanes` is also what ``inspect`` and ``replay --verify`` report until a
worker has passed (``replay --verify`` fails on a foreign tail by itself: a junk entry
does not decode, a forged signal breaks the chain or differs from the document).

Nothing read is trusted: a document or tracking whose fields do not parse, or a key of
another type, is left alone (the read loop dead-letters or repairs it when it next has an
event).
"""

from __future__ import annotations

from signals.core._time import now_iso
from signals.core.models import WriteEvent
from signals.core.wire import lane_owner_id
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.orphans import Orphan, orphaned_lanes
from workers.engine.lane_state import Pending

__all__ = ("CATCH_UP_ID", "Orphan", "Scanner", "catch_up_entry", "orphaned_lanes")

#: The entry id of a reconciliation's catch-up request: no write stream entry's (their ids
#: are above ``0-1``), so acknowledging it acknowledges nothing; a catch-up that fails is
#: neither counted as a failure nor dead-lettered (there is no event to keep), and is tried
#: again once the lane's document moves (see :meth:`Scanner.skip`).
CATCH_UP_ID = "0-1"

#: Lanes looked at per partition per pass (SSCAN's COUNT hint).
PAGE = 200


class Scanner:
    """Scans the partitions' lanes sets a page per partition per pass, resuming where the
    last pass stopped."""

    def __init__(self, redis: Client, keys: Keys, partitions: list[int], page: int = PAGE) -> None:
        self.redis, self.keys, self.page = redis, keys, page
        self._cursors = dict.fromkeys(partitions, 0)
        self._skipped: dict[str, int] = {}  # lane -> the document version its catch-up did not commit at

    def skip(self, orphans: list[Orphan]) -> None:
        """Leave these lanes alone until their documents move (their catch-up did not take:
        a fault of the lane, such as its keys refused by the ACL; a new write brings its own
        event). Bounded: forgotten all at once past 10,000 lanes."""
        if len(self._skipped) > 10_000:
            self._skipped.clear()
        self._skipped.update((orphan.lane, orphan.version) for orphan in orphans)

    async def still_orphaned(self, orphans: list[Orphan]) -> list[Orphan]:
        """Those of ``orphans`` that are orphaned, or have a foreign tail, still."""
        out: list[Orphan] = []
        for partition in sorted({o.partition for o in orphans}):
            lanes = [o.lane for o in orphans if o.partition == partition]
            out += await orphaned_lanes(self.redis, self.keys, partition, lanes, tails=True)
        return out

    async def next_page(self) -> list[Orphan]:
        """One page of each partition's lanes, and those among them to reconcile (orphaned,
        or with a foreign tail)."""
        out: list[Orphan] = []
        for partition, cursor in self._cursors.items():
            reply = await self.redis.sscan(self.keys.lanes(partition), cursor, count=self.page)
            cursor_next, members = reply
            self._cursors[partition] = int(cursor_next)
            found = await orphaned_lanes(self.redis, self.keys, partition, sorted(str(m) for m in members),
                                         tails=True)
            out += [o for o in found if self._skipped.get(o.lane) != o.version]
        return out


async def catch_up_entry(redis: Client, keys: Keys, orphan: Orphan) -> Pending:
    """A request to bring ``orphan`` up to its document (as ``dlq requeue`` makes one),
    standing for its lost write event, or (a foreign tail) for the next write the lane
    does not have (its id: :data:`CATCH_UP_ID`)."""
    owner = lane_owner_id(orphan.lane)
    resource: str | None = owner
    thread: str | None = None
    if orphan.scope == "thread":
        thread = owner
        found = await redis.hget(keys.thread(owner), "resource")
        resource = found if isinstance(found, str) else None
    event = WriteEvent(lane=orphan.lane, scope=orphan.scope, format=orphan.format,  # type: ignore[arg-type]
                       version=orphan.version, data="", op="replace", resource_id=resource, thread_id=thread,
                       written_at=now_iso())
    return Pending(orphan.partition, CATCH_UP_ID, event, None, requeued=True)
