"""Lanes whose document is ahead of their signals with no write event left to say so.

A role that may append to a write stream may also trim it (``XADD ... MAXLEN 0``: Redis
ACLs cannot refuse an argument), and the events it removes are never read. A lane is
orphaned when its document's version is past the tracking's processed write version
(``wv``) and the document's own write event (its ``eid``) is not in the partition's
write stream; an event still there (unread, or pending) is the read loop's. Workers signal
orphaned lanes (``workers.engine.reconcile``); ``inspect`` names them until then.

Nothing read is trusted: a document or tracking whose fields do not parse is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signals.core.lane import is_stream_id
from signals.core.wire import lane_scope
from signals.streams.client import Client
from signals.streams.keys import Keys

__all__ = ("Orphan", "orphaned_lanes")


@dataclass(frozen=True, slots=True)
class Orphan:
    """A lane whose document is at ``version`` while its signals cover ``processed``, and
    whose document's write event ``eid`` is gone from the write stream."""

    lane: str
    partition: int
    version: int
    processed: int
    eid: str
    format: str
    scope: str


def _int(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 16:
        return int(value)
    return None


async def orphaned_lanes(redis: Client, keys: Keys, partition: int, lanes: list[str]) -> list[Orphan]:
    """The lanes of ``lanes`` (all of ``partition``) that are orphaned (see the module header)."""
    lanes = [lane for lane in lanes if isinstance(lane, str) and lane_scope(lane) is not None]
    if not lanes:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.hmget(keys.doc(lane), "version", "eid", "format", "scope")
            pipe.hmget(keys.track(lane), "wv")
        replies = await pipe.execute(raise_on_error=False)
    behind: list[Orphan] = []
    for n, lane in enumerate(lanes):
        doc, trk = replies[2 * n], replies[2 * n + 1]
        if not isinstance(doc, list) or not isinstance(trk, list):
            continue  # a key of another type: the read loop's concern
        version, eid, fmt, scope = doc
        processed = _int(trk[0] if trk[0] is not None else "0")
        current = _int(version)
        if current is None or processed is None or current <= processed or not is_stream_id(eid or ""):
            continue
        if fmt not in ("markdown", "json") or scope not in ("resource", "thread"):
            continue
        behind.append(Orphan(lane, partition, current, processed, eid, fmt, scope))
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
