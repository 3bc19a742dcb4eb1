"""What each lane of a batch looks like in Redis, read and checked before anything is computed.

A write event only says *that* a lane changed. What a model is shown comes from the
lane's document (text, format, version) and, for a thread lane, its owner record: keys
only writers can change. Per batch this module reads, in one pipeline, each lane's
document head (``HMGET`` of its hash's version, event id and format, not its text) and
the tracking of lanes not in the worker's cache; and the whole document hash only when
its text is needed. (Not the partition's document index: writers may set its entries to
anything, and an event placed on a chain anchored there would be taken for the document's.)
For documents past the batch, the lanes' event chains are then walked back
(:func:`workers.engine.chains.walk_chains`) so the batch's events can be placed on them (see
:func:`workers.engine.commit.event_chain`).

Nothing read is trusted: a corrupt tracking hash (a non-integer, a partial hash, a write
version beyond the document's, a key of another type) marks the lane for repair, which
continues after the last version its stream shows; a corrupt document is the lane's
``fault`` (its events are dead-lettered). It computes nothing and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import msgspec
import structlog

from signals.core.lane import (
    DOCUMENT_FIELDS,
    HEAD_FIELDS,
    TRACKING_FIELDS,
    VERSION_FIELD,
    WRITE_VERSION_FIELD,
    LaneDocument,
    LaneTracking,
)
from signals.core.memory import MAX_EVENT_CHARS
from signals.core.models import WriteEvent
from signals.core.wire import MAX_VERSION, lane_owner_id, lane_scope
from signals.errors import CorruptDataError, InvalidInputError
from signals.streams.client import Client
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import raise_whole_server
from workers.engine.cache import TrackingCache

__all__ = ("LaneState", "Pending", "load_documents", "read_lanes")

log = structlog.get_logger(__name__)

#: How far past its own tracking a re-snapshot numbers to clear a tail it did not write.
_MAX_JUMP = 1_000


@dataclass(slots=True)
class Pending:
    """One write event read from a partition stream, decoded and checked on its own.

    ``prev`` is the id of the lane's previous write event as the write script recorded it
    (field ``p``; ``None`` for an event that carries no link). ``requeued``: put
    back by ``dlq requeue`` (off the chain by construction: see :func:`workers.engine.commit.plan_lane`).
    """

    partition: int
    entry_id: str
    event: WriteEvent
    prev: str | None = None
    requeued: bool = False


@dataclass(slots=True)
class LaneState:
    """What one lane looks like in Redis right now, as far as the worker can trust it.

    ``fault`` names what is wrong with the document (its events are dead-lettered);
    ``repair`` names what is wrong with the worker's own keys (the lane is re-snapshotted).
    """

    doc: LaneDocument | None = None
    tracking: LaneTracking | None = None
    expected: str = ""
    expected_version: str = ""
    fault: str | None = None
    repair: str | None = None
    reset: bool = False
    resnap: bool = False


async def read_lanes(
    redis: Client, keys: Keys, cache: TrackingCache, lanes: dict[str, int], force: dict[str, str]
) -> dict[str, LaneState]:
    """Each lane's document head (version, event id, format: one ``HMGET`` of its hash) and
    tracking (cache, else Redis), in one pipeline.

    ``lanes`` maps lane -> partition. ``force`` maps a lane to the commit status that
    sent it back (``resnap``, ``type`` or ``reset``): its tracking is read afresh and repaired
    (``unverified``, a steady-state check that failed, keeps the cached tracking). A
    lane without a document, or whose head does not parse, has its whole document hash
    read (:func:`load_documents`, which decides); so does any lane :func:`plan_lane`
    needs the text of.
    """
    states = {lane: LaneState() for lane in lanes}
    misses: list[str] = []
    for lane in lanes:
        cached = None if force.get(lane, "unverified") != "unverified" else cache.get(lane)
        if cached is None:
            misses.append(lane)
        else:
            states[lane].tracking = cached
            states[lane].expected = str(cached.write_version) if cached.write_version else ""
            states[lane].expected_version = str(cached.version)
    threads = [lane for lane in lanes if lane_scope(lane) == "thread"]
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.hmget(keys.doc(lane), list(HEAD_FIELDS))
        for lane in misses:
            pipe.hmget(keys.track(lane), list(TRACKING_FIELDS))
        for lane in threads:  # the owner is checked against every event of a thread lane
            pipe.hget(keys.thread(lane_owner_id(lane)), "resource")
        replies = list(await pipe.execute(raise_on_error=False))
    raise_whole_server(replies)
    unread = _from_heads(keys, list(lanes), replies, states)
    tracking_replies = replies[len(lanes):len(lanes) + len(misses)]
    unread += _apply_owners(states, threads, replies[len(lanes) + len(misses):])
    await load_documents(redis, keys, states, unread)
    for lane, reply in zip(misses, tracking_replies, strict=True):
        _parse_tracking(keys, lane, reply, states[lane])
    _apply_force(states, force)
    await _base_values(cache, states)
    return states


def _apply_owners(states: dict[str, LaneState], threads: list[str], owners: list[object]) -> list[str]:
    """Give indexed thread lanes their owner; returns those without a readable owner record
    (their document hash and owner are read on the slow path, which decides)."""
    slow: list[str] = []
    for lane, owner in zip(threads, owners, strict=True):
        doc = states[lane].doc
        if doc is not None and _is_resource_id(owner):
            states[lane].doc = msgspec.structs.replace(doc, resource_id=cast(str, owner))
        elif doc is not None:
            slow.append(lane)
    return slow


def _from_heads(keys: Keys, lanes: list[str], replies: list[object], states: dict[str, LaneState]) -> list[str]:
    """Fill in documents from their heads; returns the lanes whose head says nothing (no
    document, or a head that does not parse: the whole hash is read, and decides)."""
    unread: list[str] = []
    for lane, reply in zip(lanes, replies, strict=False):
        try:
            states[lane].doc = None if isinstance(reply, Exception) else LaneDocument.from_head(
                lane, cast(list[str | None], reply), keys.doc(lane))
        except CorruptDataError:
            states[lane].doc = None
        if states[lane].doc is None:
            unread.append(lane)
    return unread


async def load_documents(redis: Client, keys: Keys, states: dict[str, LaneState], lanes: list[str]) -> None:
    """Read the document hashes (text included) and thread owners of ``lanes``: the
    slow path, for lanes whose text a signal needs or whose head says nothing."""
    if not lanes:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.hmget(keys.doc(lane), list(DOCUMENT_FIELDS))
            pipe.hget(keys.thread(lane_owner_id(lane)), "resource") if lane_scope(lane) == "thread" else pipe.ping()
        replies = list(await pipe.execute(raise_on_error=False))
    raise_whole_server(replies)
    for n, lane in enumerate(lanes):
        owner = replies[2 * n + 1] if lane_scope(lane) == "thread" else None
        states[lane].doc, states[lane].fault = _parse_document(keys, lane, replies[2 * n], owner)


def _apply_force(states: dict[str, LaneState], force: dict[str, str]) -> None:
    """Mark the lanes the last commit sent back: re-snapshot, or repair mistyped keys."""
    for lane, status in force.items():
        if status == "resnap":
            states[lane].resnap = True
        elif status == "type" and states[lane].repair is None:
            states[lane].repair = "a lane key had another type"
        elif status == "reset":
            states[lane].repair = "the signal stream takes no new entry (a foreign entry holds the last id)"
            states[lane].reset = True


def _parse_document(keys: Keys, lane: str, reply: object, owner: object) -> tuple[LaneDocument | None, str | None]:
    """A lane's document from its ``HMGET`` (and owner ``HGET``) reply, or the fault."""
    where = keys.doc(lane)
    if isinstance(reply, Exception):
        return None, f"corrupt document: {where}: {reply}"
    if isinstance(owner, Exception):
        return None, f"corrupt thread record: {keys.thread(lane_owner_id(lane))}: {owner}"
    data = reply[0] if isinstance(reply, list) and reply else None
    if isinstance(data, str) and len(data) > MAX_EVENT_CHARS:  # bounded work, and no model takes it
        return None, (f"oversized document: {where} holds {len(data):,} characters, over the worker's limit of "
                      f"{MAX_EVENT_CHARS:,} (that of a write event)")
    if owner is not None and not _is_resource_id(owner):  # '' or 'x{p1}' would be its signals' resourceId
        return None, f"corrupt thread record: {keys.thread(lane_owner_id(lane))} field resource is not a resource id"
    try:
        return LaneDocument.parse(lane, cast(list[str | None], reply), cast(str | None, owner), where), None
    except CorruptDataError as e:
        return None, f"corrupt document: {e}"


def _is_resource_id(owner: object) -> bool:
    try:
        validate_id(owner, "resource id")
    except InvalidInputError:
        return False
    return True


def _parse_tracking(keys: Keys, lane: str, reply: object, state: LaneState) -> None:
    """Parse a tracking hash read from Redis; a corrupt one marks the lane for repair."""
    where = keys.track(lane)
    if isinstance(reply, Exception):
        state.expected = "!type"
        state.repair = f"{where}: {reply}"
        return
    fields = cast(list[str | None], reply)
    raw_v = fields[TRACKING_FIELDS.index(VERSION_FIELD)] or ""
    state.expected_version = raw_v if raw_v.isprintable() and raw_v.isascii() else "!junk"
    raw_wv = fields[TRACKING_FIELDS.index(WRITE_VERSION_FIELD)] or ""
    # the CAS compares what was read; bytes that are not UTF-8 cannot travel in JSON: the
    # repair then replaces the tracking without comparing it
    state.expected = raw_wv if raw_wv.isprintable() and raw_wv.isascii() else "!junk"
    try:
        tracking = LaneTracking.parse(fields, where)
    except CorruptDataError as e:
        state.repair = str(e)
        return
    if state.doc is not None and tracking.write_version > state.doc.version:
        state.repair = (f"{where} has processed write version {tracking.write_version}, "
                        f"beyond its document's version {state.doc.version}")
        return
    state.tracking = tracking


async def _base_values(cache: TrackingCache, states: dict[str, LaneState]) -> None:
    """Fill in the delta base of freshly read trackings; recover the version of repaired lanes."""
    needed = {lane: s.tracking for lane, s in states.items()
              if s.tracking is not None and s.tracking.value is None and s.doc is not None and not s.repair}
    if needed:
        values, misnumbered = await cache.values_for({lane: (t.version, t.tail, t.since_snapshot)
                                                             for lane, t in needed.items()})
        for lane, tracking in needed.items():
            version = misnumbered.get(lane, tracking.version)
            if lane in misnumbered:  # the tail signal is the tracked one: its version is the lane's
                states[lane].repair = f"the tracking's version {tracking.version} is not its tail signal's ({version})"
            states[lane].tracking = msgspec.structs.replace(tracking, version=version, value=values.get(lane))
    for lane, state in states.items():
        if state.resnap and state.repair is None and state.tracking is not None:
            # the stream does not end where the tracking says: number the snapshot past
            # anything in its tail, so no subscriber takes it for a version it already saw
            # (within _MAX_JUMP: a forged version near 2**53 must not push the lane out of range)
            tail_version = await cache.last_version(lane) or 0
            if state.tracking.version < tail_version <= state.tracking.version + _MAX_JUMP:
                state.tracking = msgspec.structs.replace(state.tracking, version=tail_version)
        if state.repair is None or state.doc is None:
            continue
        known = state.tracking.version if state.tracking is not None else 0
        last = await cache.last_version(lane)
        state.reset = state.reset or last is None
        version = max(known, last or 0)
        if version > MAX_VERSION - _MAX_JUMP:  # a forged version at the end of the range: start again
            version, state.reset = 0, True
        state.tracking = LaneTracking(version=version, value=None)
        log.warning("worker.lane_repair", lane=lane, reason=state.repair, continue_after=version)
