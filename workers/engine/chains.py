"""Lanes' chains of genuine write events: walking them back from the documents
(:func:`walk_chains`: from a document's own chain field when it tells, else on the write
stream with ``chain.lua``), and the links found, kept between batches (:class:`ChainLinks`)
so that later events are placed without walking again.

A chain walk (:func:`walk_chains`, or the commit script's check of a
steady-state lane) goes from a document's event down to a batch's, and every id it
passes is genuine (each names the one before it, field ``p``). A later batch whose events
are among those ids is placed from them, and its steady-state check may stop at the
newest of them (the lane's head) instead of walking to the batch. What is kept is
bounded: past the tracking cache's size everything is dropped, and a lost link is
walked again (one round trip), never trusted without a walk.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any, cast

from signals.core.codec import encode_json
from signals.core.lane import LaneDocument, LaneTracking
from signals.streams.client import Client, queue_script
from signals.streams.keys import Keys
from signals.streams.redis_errors import raise_whole_server
from signals.streams.scripts import missing
from workers.engine.lane_state import LaneState, Pending

__all__ = ("CHAIN_IDS", "ChainLinks", "chain_frontier", "chain_path", "join_chain", "walk_chains")

#: At most about how many event ids a document's chain holds (``CHAIN_IDS`` in write.lua,
#: which keeps them in two blocks of up to 8 * CHAIN_IDS bytes, 16 bytes per id: between 64
#: and 128 ids of today's 15-character stream ids).
CHAIN_IDS = 128
#: Chain walks of a partition reading the stream in bulk first: from this many steps
#: together (below, one XRANGE per step costs less), reading at most this many entries.
_BULK_MIN_STEPS = 64
_BULK_MAX_ENTRIES = 20_000


class ChainLinks:
    """Per lane: the links found by walks (id -> the id before it) and the newest id of
    them (where the links start)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.known: dict[str, dict[str, str]] = {}
        self.heads: dict[str, str] = {}

    def links(self, lane: str) -> dict[str, str] | None:
        """The lane's known links, if any."""
        return self.known.get(lane)

    def head_for(self, lane: str, eid: str) -> str | None:
        """The lane's head, when ``eid`` (the newest event of its batch) is among its known
        links: a steady-state check may then stop there."""
        known = self.known.get(lane)
        return self.heads.get(lane) if known and eid in known else None

    def committed(self, lane: str, entries: Iterable[Pending], walked: list[str]) -> None:
        """After a commit: forget the committed events' links (not needed to place later
        events) and remember those a steady-state check walked (the next events).

        The check reports the ids it walked, newest first, not the stop it reached (the
        batch's newest event or the head): the last one is left unlinked, and a later walk
        on the stream links it (one step)."""
        known = self.known.get(lane)
        if known is not None:
            for e in entries:
                known.pop(e.entry_id, None)
            if not known:
                del self.known[lane]
                self.heads.pop(lane, None)
        if walked:  # genuine: the walk went from the document's event down to the batch's
            self.known.setdefault(lane, {}).update(itertools.pairwise(walked))
            self.heads[lane] = walked[0]
        if len(self.known) > self.capacity:  # bounded: a lost path is walked again
            self.known.clear()
            self.heads.clear()


async def walk_chains(
    redis: Client, keys: Keys, script: Any, states: dict[str, LaneState], *, by_lane: dict[str, list[Pending]],
    known: dict[str, dict[str, str]], heads: dict[str, str] | None = None, limit: int = 256,
) -> None:
    """Walk back on the stream from where the documents' chains leave what is known (one
    read-only script per partition) and add the links found to ``known[lane]``: genuine
    event id -> the id its ``p`` names (see :func:`workers.engine.commit.event_chain`); and the
    document's event, now linked down to the batch, to ``heads[lane]`` (see
    :func:`workers.engine.commit.steady_check`).

    The walk of a lane starts at its document's event, or where the links already known
    from there run out (:func:`chain_frontier`): a lane whose document moved on is walked
    only over the writes since. It stops at the batch's events, the last processed event
    or an id already linked. Lanes more than ``limit`` writes ahead are left as they are:
    their events cannot be placed, and the worker catches up to the document instead (one
    signal for the backlog).

    Where the lanes of a partition are, together, at least :data:`_BULK_MIN_STEPS` writes
    ahead (a backlog: the documents are past the whole batch), the script first reads the
    stream downward from the newest start in chunks, up to twice that many entries, and
    steps through what it read without one XRANGE per step.
    """
    todo: dict[int, list[_Walk]] = defaultdict(list)
    for lane, entries in by_lane.items():
        state, ids, links = states[lane], {e.entry_id for e in entries}, known.get(lane, {})
        doc, tracking = state.doc, state.tracking or LaneTracking()
        newest = max(e.event.version for e in entries)
        if doc is None or not doc.eid or newest <= tracking.write_version:
            continue
        start = chain_frontier(doc.eid, links, ids, tracking.write_event)
        if start is None:
            continue
        stops = [*ids, *links, *([tracking.write_event] if tracking.write_event else [])]
        todo[entries[0].partition].append(_Walk(lane, start, stops, max(doc.version - newest, 1)))
    if not todo:
        return
    await _from_documents(redis, keys, states, todo, known=known, heads=heads)
    todo = {partition: lanes for partition, lanes in todo.items() if lanes}
    if not todo:
        return
    replies = await _walk_calls(redis, keys, script, todo, limit)
    raise_whole_server(replies)
    for (_, lanes), reply in zip(todo.items(), replies, strict=True):
        if isinstance(reply, list):
            _record_paths(states, [walk.lane for walk in lanes], reply, known, heads)


async def _walk_calls(redis: Client, keys: Keys, script: Any, todo: dict[int, list[_Walk]], limit: int) -> list[Any]:
    """The chain script over ``todo``'s partitions in one pipeline (again once the worker
    has loaded the library, when the server had none: nothing ran)."""
    for attempt in range(2):
        async with redis.pipeline(transaction=False) as pipe:
            for partition, lanes in todo.items():
                items = [{"start": walk.start, "stops": walk.stops} for walk in lanes]
                args: list[str | int] = [limit, encode_json(items)]
                ahead = sum(walk.steps for walk in lanes)
                if ahead >= _BULK_MIN_STEPS:
                    top = max((int(ms), int(seq)) for ms, _, seq in (walk.start.partition("-") for walk in lanes))
                    args += ["-".join(map(str, top)), min(2 * ahead, _BULK_MAX_ENTRIES)]
                await queue_script(pipe, script, [keys.writes(partition)], args)
            replies = list(await pipe.execute(raise_on_error=False))
        if attempt or not any(missing(reply) for reply in replies):
            break
        await script.load()
    return replies


@dataclass(slots=True)
class _Walk:
    """One lane's walk: from ``start`` down to one of ``stops``, about ``steps`` long."""

    lane: str
    start: str
    stops: list[str]
    steps: int


async def _from_documents(
    redis: Client, keys: Keys, states: dict[str, LaneState], todo: dict[int, list[_Walk]], *,
    known: dict[str, dict[str, str]], heads: dict[str, str] | None,
) -> None:
    """Place lanes from their documents' chains (one ``HMGET`` each, in one pipeline):
    the lane's last event ids as the write script keeps them, the same links as the events'
    ``p`` (see write.lua), read without reading the events. A lane whose chain is absent,
    malformed, does not end at the document's event or does not reach a stop stays in
    ``todo`` for the walk on the stream; the others leave it."""
    async with redis.pipeline(transaction=False) as pipe:
        for lanes in todo.values():
            for walk in lanes:
                pipe.hmget(keys.doc(walk.lane), ["chain0", "chain"])
        replies = list(await pipe.execute(raise_on_error=False))
    raise_whole_server(replies)
    fields = iter(replies)
    for lanes in todo.values():
        left = []
        for walk in lanes:
            reply = next(fields)
            doc = cast(LaneDocument, states[walk.lane].doc)
            path = chain_path(join_chain(reply), doc.eid, walk.start, set(walk.stops))
            if path is None:
                left.append(walk)
            else:
                _record_paths(states, [walk.lane], [path], known, heads)
        lanes[:] = left


def join_chain(reply: object) -> object:
    """A document's chain from its fields ``chain0`` (the older block, may be absent) and
    ``chain`` (the newest ids), as one text, oldest first; anything else as it is (for
    :func:`chain_path` to refuse).

    The write script starts ``chain`` from the last id of the block it moved to
    ``chain0``: the blocks are joined only where they share that id. Otherwise (a
    ``chain0`` left by a write script that kept one field, or by anyone else) ``chain``
    alone is used: joined anyway, the blocks would make up a link between two ids that are
    not each other's neighbours, and the events between them would be off the chain."""
    if not isinstance(reply, list) or len(reply) != 2:  # the two fields asked for
        return None
    older, newest = reply
    if not (isinstance(older, str) and isinstance(newest, str)):
        return newest if older is None else None
    first, _, rest = newest.partition(" ")
    if not rest or older.rpartition(" ")[2] != first:
        return newest
    return f"{older} {rest}"


def chain_path(field: object, eid: str, start: str, stops: Set[str]) -> list[str] | None:
    """The walk from ``start`` down to a stop along a document's ``chain`` field, in the
    chain walk's form (the stop reached, then the ids walked, newest first), or ``None``
    when the field cannot tell: absent, too long, not stream ids ending at the document's
    event ``eid``, ``start`` not on it, an id twice on the walk, or no stop on it below
    ``start``."""
    if not isinstance(field, str) or not field or len(field) > CHAIN_IDS * 42 or not _CHAIN.fullmatch(field):
        return None
    ids = field.split(" ")
    if ids[-1] != eid or start not in ids:
        return None
    walked: list[str] = []
    for n in range(ids.index(start), -1, -1):
        if ids[n] in stops:
            return [ids[n], *walked] if len(set(walked)) == len(walked) else None
        walked.append(ids[n])
    return None


#: A chain field: stream ids (digits, '-', digits), one space apart.
_CHAIN = re.compile(r"[0-9]{1,20}-[0-9]{1,20}(?: [0-9]{1,20}-[0-9]{1,20})*")


def _record_paths(
    states: dict[str, LaneState], lanes: list[str], paths: list[Any], known: dict[str, dict[str, str]],
    heads: dict[str, str] | None,
) -> None:
    """Keep the links of the walks that reached a stop (the batch or a linked id: the
    whole path is genuine), and each lane's document event, where its links now start."""
    for lane, path in zip(lanes, paths, strict=True):
        if path and path[0]:
            walked = [str(i) for i in path]  # the stop reached, then the ids walked, newest first
            known.setdefault(lane, {}).update(zip(walked[1:], [*walked[2:], walked[0]], strict=True))
            if heads is not None and len(walked) > 1:
                heads[lane] = cast(LaneDocument, states[lane].doc).eid


def chain_frontier(start: str, links: Mapping[str, str], ids: Set[str], anchor: str) -> str | None:
    """Where the chain from ``start`` (a document's event) leaves the ``links`` known, or
    ``None`` when the links lead to the batch (``ids``), the tracked ``anchor`` or the
    beginning of the chain: nothing to walk on the stream."""
    cursor = start
    for _ in range(len(links) + 1):  # genuine links go back in the stream: no cycle, but bounded
        if not cursor or cursor in ids or (anchor and cursor == anchor):
            return None
        if cursor not in links:
            return cursor
        cursor = links[cursor]
    return None
