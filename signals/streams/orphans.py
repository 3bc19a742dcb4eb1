"""Lanes the workers' reconciliation signals: documents ahead of their signals with no
write event left to say so, and signal streams that do not end where the workers left them.

A role that may append to a write stream may also trim it (``XADD ... MAXLEN 0``: Redis
ACLs cannot refuse an argument), and the events it removes are never read. A lane is
orphaned when its document's version is past the tracking's processed write version
(``wv``) and the document's own write event (its ``eid``) is not in the partition's
write stream; an event still there (unread, or pending) is the read loop's.

With ``tails``, a lane also needs reconciling when its document is not ahead (its tracking
well formed: ``wv`` the document's version, ``v`` a version, ``tail`` a stream id or none)
and its signal stream's last entry is not the tracking's ``tail``: someone else appended
to it (or deleted or replaced its end), and a reader that starts later would take what is
there for the latest memory. The commit script's tail check finds that at the lane's next
write; an idle lane has none, so the reconciliation brings it there. What is read here is
a hint, never the decision (a commit between the reads shows as a mismatch): the commit
script checks the tail again, atomically, before anything is appended.

Workers signal such lanes (``workers.engine.reconcile``); ``inspect`` names orphaned ones
until then. Nothing read is trusted: a document or tracking whose fields do not parse, or
a key of another type, is left alone (the read loop dead-letters or repairs it when it
next has an event).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signals.core.lane import is_stream_id
from signals.core.wire import lane_scope
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.redis_errors import ReplyTooLargeError

__all__ = ("Orphan", "orphaned_lanes")


@dataclass(frozen=True, slots=True)
class Orphan:
    """A lane whose document is at ``version`` while its signals cover ``processed``, and
    whose document's write event ``eid`` is gone from the write stream; or, when ``tail``
    is set, a lane signalled up to its document whose signal stream ends at ``last`` (''
    for none) instead of the tracking's ``tail`` ('' for none): a foreign tail."""

    lane: str
    partition: int
    version: int
    processed: int
    eid: str
    format: str
    scope: str
    tail: str | None = None
    last: str = ""

    @property
    def foreign_tail(self) -> bool:
        """Whether the lane's signal stream does not end at its tracking's tail."""
        return self.tail is not None


def _int(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 16:
        return int(value)
    return None


#: A lane's stream end left unread (without ``tails``, or its last entry alone over the
#: client's reply bound): not compared with the tail.
_UNREAD = object()


async def orphaned_lanes(redis: Client, keys: Keys, partition: int, lanes: list[str], *,
                         tails: bool = False) -> list[Orphan]:
    """The lanes of ``lanes`` (all of ``partition``) that are orphaned, and with ``tails``
    those with a foreign tail too (see the module header). One round trip for the lanes'
    documents, trackings and (with ``tails``) stream ends; one more for the orphans found."""
    lanes = [lane for lane in lanes if isinstance(lane, str) and lane_scope(lane) is not None]
    if not lanes:
        return []
    replies = await _read(redis, keys, lanes, tails=tails)
    behind: list[Orphan] = []
    foreign: list[Orphan] = []
    for lane, (doc, trk, last) in zip(lanes, replies, strict=True):
        if not isinstance(doc, list) or not isinstance(trk, list):
            continue  # a key of another type: the read loop's concern
        version, eid, fmt, scope = doc
        processed = _int(trk[0] if trk[0] is not None else "0")
        current = _int(version)
        if current is None or processed is None or not is_stream_id(eid or ""):
            continue
        if fmt not in ("markdown", "json") or scope not in ("resource", "thread"):
            continue
        if current > processed:
            behind.append(Orphan(lane, partition, current, processed, eid, fmt, scope))
        elif current == processed and tails:
            found = _foreign_tail(trk, last)
            if found is not None:
                foreign.append(Orphan(lane, partition, current, processed, eid, fmt, scope, *found))
    return await _gone(redis, keys, partition, behind) + foreign


def _foreign_tail(trk: list[Any], last: object) -> tuple[str, str] | None:
    """``(tail, last)`` when a well-formed tracking's tail is not the stream's last id."""
    _, v, tail = trk
    tail = tail if tail is not None else ""
    if not isinstance(last, list) or _int(v) is None or (tail and not is_stream_id(tail)):
        return None  # unread, another type, or a tracking the read loop repairs
    last_id = last[0][0] if last else ""
    return None if not isinstance(last_id, str) or last_id == tail else (tail, last_id)


async def _read(redis: Client, keys: Keys, lanes: list[str], *, tails: bool) -> list[tuple[object, object, object]]:
    """Per lane: its document head, its tracking (``wv``, ``v``, ``tail``) and, with ``tails``,
    its signal stream's last entry. A stream end is a whole signal: a page whose replies
    are over the client's bound is read again in halves, and a lane over it alone is read
    without its stream end (:data:`_UNREAD`)."""
    try:
        async with redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                pipe.hmget(keys.doc(lane), "version", "eid", "format", "scope")
                pipe.hmget(keys.track(lane), "wv", "v", "tail")
                if tails:
                    pipe.xrevrange(keys.signals(lane), count=1)
            replies = await pipe.execute(raise_on_error=False)
    except ReplyTooLargeError:
        if not tails:
            raise
        if len(lanes) == 1:
            [(doc, trk, _)] = await _read(redis, keys, lanes, tails=False)
            return [(doc, trk, _UNREAD)]
        half = len(lanes) // 2
        return await _read(redis, keys, lanes[:half], tails=True) + await _read(redis, keys, lanes[half:], tails=True)
    step = 3 if tails else 2
    return [(replies[step * n], replies[step * n + 1], replies[step * n + 2] if tails else _UNREAD)
            for n in range(len(lanes))]


async def _gone(redis: Client, keys: Keys, partition: int, behind: list[Orphan]) -> list[Orphan]:
    """Those of ``behind`` whose write event is gone from the write stream, their tracking unmoved."""
    if not behind:
        return []
    writes = keys.writes(partition)
    async with redis.pipeline(transaction=False) as pipe:
        for orphan in behind:  # the event, then the tracking again: a worker that committed the event
            pipe.xrange(writes, orphan.eid, orphan.eid)  # meanwhile (and the trim that removed it after)
            pipe.hmget(keys.track(orphan.lane), "wv")  # shows in the tracking read after the event
        found = await pipe.execute(raise_on_error=False)
    return [orphan for n, orphan in enumerate(behind)
            if found[2 * n] == [] and isinstance(found[2 * n + 1], list)
            and _int(found[2 * n + 1][0] or "0") == orphan.processed]
