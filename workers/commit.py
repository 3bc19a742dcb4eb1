"""The lane commit protocol: read each lane's truth, compute its signal, commit atomically.

A write event only says *that* a lane changed. What a model is shown comes from the
lane's document hash (text, format, version) and, for a thread lane, its owner record:
keys only writers can change. So one batch is, per lane: read the document (and the
tracking on a cache miss) in one pipeline; check every event against the document
(version a non-negative integer within 2**53 and not beyond the document's, the same
format and owner), dead-lettering the ones that do not fit; emit at most one signal, for
the document as it is now (events of versions in between are acknowledged without a
signal of their own: the model needs the current state, not every step); then one commit
script per partition (signal XADD + tracking + XACK, atomic per lane).

Nothing read from Redis is trusted, and a fault stays with its lane:

* a corrupt tracking hash (``v abc``, a write version beyond the document's, a key of
  another type) is repaired: the lane continues after the last version its stream shows,
  with a snapshot;
* a signal stream that is missing, of another type, or does not end at the signal the
  tracking names (deleted, trimmed, appended to by someone else) gets a snapshot (the
  commit script checks, the lane is recomputed);
* a corrupt document hash dead-letters the lane's events with the reason;
* a commit script that fails for any other per-lane reason is retried lane by lane, so
  one lane cannot hold up its partition; the failing lane's events are retried and then
  dead-lettered. Whole-server conditions (unreachable, out of memory, loading, read-only)
  propagate to the supervisor, which backs off and retries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Set
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import structlog
from redis.asyncio.cluster import RedisCluster

from signals._util import Client, lua, queue_script
from signals.codec import encode_json
from signals.errors import CorruptDataError
from signals.keys import GROUP, Keys
from signals.lane import (
    DOCUMENT_FIELDS,
    MAX_VERSION,
    TRACKING_FIELDS,
    LaneDocument,
    LaneOptions,
    LaneTracking,
    advance,
)
from signals.models import WriteEvent
from signals.signing import Signer
from workers.cache import TrackingCache
from workers.faults import is_whole_server

__all__ = ("BatchStats", "LaneCommit", "LaneState", "Pending", "read_lanes", "run_commits", "walk_chains")

log = structlog.get_logger(__name__)

#: How far past its own tracking a re-snapshot numbers to clear a tail it did not write.
_MAX_JUMP = 1_000


@dataclass(slots=True)
class BatchStats:
    """Counters a worker accumulates (and the demo and benchmarks print)."""

    events: int = 0
    signals: int = 0
    snapshots: int = 0
    deltas: int = 0
    skipped: int = 0
    dead_letters: int = 0
    conflicts: int = 0
    repairs: int = 0

    def add(self, other: BatchStats) -> None:
        """Accumulate another batch's counters."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class Pending:
    """One write event read from a partition stream, decoded and checked on its own.

    ``prev`` is the id of the lane's previous write event as the write script recorded it
    (field ``p``; ``None`` for events written before chains existed).
    """

    partition: int
    entry_id: str
    event: WriteEvent
    prev: str | None = None


@dataclass(slots=True)
class LaneState:
    """What one lane looks like in Redis right now, as far as the worker can trust it.

    ``fault`` names what is wrong with the document (its events are dead-lettered);
    ``repair`` names what is wrong with the worker's own keys (the lane is re-snapshotted).
    """

    doc: LaneDocument | None = None
    tracking: LaneTracking | None = None
    expected: str = ""
    fault: str | None = None
    repair: str | None = None
    reset: bool = False
    resnap: bool = False


@dataclass(slots=True)
class LaneCommit:
    """What one lane contributes to its partition's commit script."""

    lane: str
    state: LaneState
    entries: list[Pending]
    signals: list[str] = field(default_factory=list)
    macs: list[str] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    acks: list[str] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    final: LaneTracking = field(default_factory=LaneTracking)

    def payload(self) -> dict[str, Any]:
        """The lane's item in the commit script's JSON argument (fields by name)."""
        state = self.state
        check_tail = state.tracking is not None and not state.resnap and not state.repair
        return {
            "expected": state.expected,
            "tail": state.tracking.tail if check_tail and state.tracking else False,
            "repair": int(state.repair is not None),
            "reset": int(state.reset),
            "fields": self.final.fields(),
            "signals": self.signals,
            "macs": self.macs,
            "snapshot": self.snapshots,
            "acks": self.acks,
        }


def _raise_whole_server(replies: Iterable[object]) -> None:
    for reply in replies:
        if isinstance(reply, Exception) and is_whole_server(reply):
            raise reply


async def read_lanes(
    redis: Client, keys: Keys, cache: TrackingCache, lanes: dict[str, int], force: dict[str, str]
) -> dict[str, LaneState]:
    """Each lane's document version, event id and format (one ``HMGET`` of the partition's
    document index per partition) and tracking (cache, else Redis), in one pipeline.

    ``lanes`` maps lane -> partition. ``force`` maps a lane to the commit status that
    sent it back (``resnap``, ``type`` or ``reset``): its tracking is read afresh and repaired. A
    lane missing from the index, or whose entry does not parse, has its document hash
    read (:func:`load_documents`); so does any lane :func:`plan_lane` needs the text of.
    """
    states = {lane: LaneState() for lane in lanes}
    by_partition: dict[int, list[str]] = defaultdict(list)
    for lane, partition in lanes.items():
        by_partition[partition].append(lane)
    misses: list[str] = []
    for lane in lanes:
        cached = None if lane in force else cache.get(lane)
        if cached is None:
            misses.append(lane)
        else:
            states[lane].tracking = cached
            states[lane].expected = str(cached.write_version) if cached.write_version else ""
    async with redis.pipeline(transaction=False) as pipe:
        for partition, group in by_partition.items():
            pipe.hmget(keys.documents(partition), group)
        for lane in misses:
            pipe.hmget(keys.track(lane), list(TRACKING_FIELDS))
        replies = list(await pipe.execute(raise_on_error=False))
    _raise_whole_server(replies)
    unindexed = _from_index(keys, by_partition, replies, states)
    await load_documents(redis, keys, states, unindexed)
    for lane, reply in zip(misses, replies[len(by_partition):], strict=True):
        _parse_tracking(keys, lane, reply, states[lane])
    _apply_force(states, force)
    await _base_values(redis, keys, cache, states)
    return states


def _from_index(
    keys: Keys, by_partition: dict[int, list[str]], replies: list[object], states: dict[str, LaneState]
) -> list[str]:
    """Fill in documents from the index replies; returns the lanes it does not list."""
    unindexed: list[str] = []
    for (partition, group), reply in zip(by_partition.items(), replies, strict=False):
        entries = reply if isinstance(reply, list) else [None] * len(group)
        for lane, raw in zip(group, entries, strict=True):
            try:
                states[lane].doc = LaneDocument.from_index(lane, raw, f"{keys.documents(partition)} field {lane}")
            except CorruptDataError:
                states[lane].doc = None  # the document hash itself decides
            if states[lane].doc is None:
                unindexed.append(lane)
    return unindexed


async def load_documents(redis: Client, keys: Keys, states: dict[str, LaneState], lanes: list[str]) -> None:
    """Read the document hashes (text included) and thread owners of ``lanes``: the
    slow path, for lanes whose text a signal needs or that the index does not list."""
    if not lanes:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for lane in lanes:
            pipe.hmget(keys.doc(lane), list(DOCUMENT_FIELDS))
            pipe.hget(keys.thread(lane[2:]), "resource") if lane.startswith("t:") else pipe.ping()
        replies = list(await pipe.execute(raise_on_error=False))
    _raise_whole_server(replies)
    for n, lane in enumerate(lanes):
        owner = replies[2 * n + 1] if lane.startswith("t:") else None
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
        return None, f"corrupt thread record: {keys.thread(lane[2:])}: {owner}"
    try:
        return LaneDocument.parse(lane, cast(list[str | None], reply), cast(str | None, owner), where), None
    except CorruptDataError as e:
        return None, f"corrupt document: {e}"


def _parse_tracking(keys: Keys, lane: str, reply: object, state: LaneState) -> None:
    """Parse a tracking hash read from Redis; a corrupt one marks the lane for repair."""
    where = keys.track(lane)
    if isinstance(reply, Exception):
        state.expected = "!type"
        state.repair = f"{where}: {reply}"
        return
    fields = cast(list[str | None], reply)
    raw_wv = fields[TRACKING_FIELDS.index("wv")] or ""
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


async def _base_values(redis: Client, keys: Keys, cache: TrackingCache, states: dict[str, LaneState]) -> None:
    """Fill in the delta base of freshly read trackings; recover the version of repaired lanes."""
    needed = {lane: s.tracking for lane, s in states.items()
              if s.tracking is not None and s.tracking.value is None and s.doc is not None and not s.repair}
    if needed:
        values = await cache.values_for({lane: (t.version, t.tail) for lane, t in needed.items()})
        for lane, tracking in needed.items():
            states[lane].tracking = msgspec.structs.replace(tracking, value=values.get(lane))
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


def plan_lane(
    lane: str, state: LaneState, entries: list[Pending], *, options: LaneOptions, now: str, signer: Signer | None,
    known: Set[str] = frozenset(),
) -> tuple[LaneCommit, list[tuple[Pending, str]]] | None:
    """Check the lane's events against its document and event chain; compute its signals.

    An event on the lane's chain (see :func:`event_chain`) is signalled with its own text;
    an event at the document's version with the document's; an event that cannot be
    placed on the chain (the chain runs past this batch, or events from before chains
    existed) is acknowledged without a signal, and the document's current version is
    signalled instead (a catch-up). An event that contradicts the chain or the document
    is dead-lettered. A lane under repair gets one snapshot of its document.

    Returns the commit and the events to dead-letter with their reasons, or ``None`` when
    the document's text is needed and was not read (see :func:`load_documents`).
    """
    commit = LaneCommit(lane, state, entries)
    doc = state.doc
    if state.fault is not None or doc is None:
        reason = "poison: " + (state.fault or f"unknown lane {lane!r} (no document)")
        commit.entries = []
        return commit, [(entry, reason) for entry in entries]
    tracking = state.tracking or LaneTracking()
    forced = state.resnap or state.repair is not None
    commit.stats.repairs += state.repair is not None
    genuine, complete = event_chain(entries, doc, tracking, known)
    signalled_versions = {e.event.version for e in entries if e.entry_id in genuine}
    poison: list[tuple[Pending, str]] = []
    catch_up = forced
    processed = tracking.write_version  # before this batch: older events are duplicates
    for pending in entries:
        event = pending.event
        refusal = _event_mismatch(event, doc)
        if refusal is None and pending.entry_id not in genuine and event.version > processed:
            refusal = _off_chain(pending, doc, complete, signalled_versions)
            catch_up = catch_up or refusal is None
        if refusal is not None:
            poison.append((pending, refusal))
            continue
        commit.acks.append(pending.entry_id)
        if forced or pending.entry_id not in genuine or event.version <= tracking.write_version:
            commit.stats.skipped += 1
            continue
        before = len(commit.signals)  # an event on the chain carries its version's text
        tracking = _emit(commit, tracking, event, pending.entry_id, options=options, now=now, signer=signer)
        commit.stats.skipped += len(commit.signals) == before  # unchanged cacheKey: deduplicated
    if catch_up and (forced or tracking.write_version < doc.version):
        if doc.data is None:
            return None
        if forced:
            tracking = msgspec.structs.replace(tracking, value=None,
                                               write_version=min(tracking.write_version, doc.version - 1))
        tracking = _emit(commit, tracking, doc.event(), doc.eid, options=options, now=now, signer=signer)
    acked = set(commit.acks)
    commit.entries = [pending for pending in entries if pending.entry_id in acked]
    commit.final = tracking
    return commit, poison


def _emit(
    commit: LaneCommit, tracking: LaneTracking, event: WriteEvent, event_id: str, *, options: LaneOptions, now: str,
    signer: Signer | None,
) -> LaneTracking:
    """Advance the lane by one (trusted) event; queue the signal, if any, in the commit."""
    final, signal = advance(tracking, event, options, now=now)
    final = msgspec.structs.replace(final, tail=tracking.tail, write_event=event_id)
    if signal is None:
        return final
    payload = encode_json(signal)
    snapshot = signal.mode == "snapshot"
    commit.signals.append(payload)
    commit.macs.append(signer.mac(commit.lane, payload) if signer else "")
    commit.snapshots.append(int(snapshot))
    commit.stats.signals += 1
    commit.stats.snapshots += snapshot
    commit.stats.deltas += not snapshot
    return final


def event_chain(
    entries: list[Pending], doc: LaneDocument, tracking: LaneTracking, known: Set[str] = frozenset()
) -> tuple[set[str], bool]:
    """The ids of the batch's events that are on the lane's chain of genuine writes, and
    whether the chain from the worker's last processed event up to the batch's newest
    genuine event is whole (then an event off the chain is a forgery).

    The write script gives every event the id of the lane's previous event (``p``) and
    records its own in the document (``eid``): walking back from the document's event
    follows genuine events only (an appended forgery can name any ``p``, but no genuine
    event or document names the forgery). ``known`` holds ids already found genuine by
    such a walk on the stream (:func:`walk_chains`), for documents past the batch.
    """
    by_id = {e.entry_id: e for e in entries}
    anchor = tracking.write_event if tracking.write_event or not tracking.write_version else None
    if doc.eid in by_id:
        start = doc.eid
    else:
        on_chain = [e for e in entries if e.entry_id in known]
        start = max(on_chain, key=lambda e: e.event.version).entry_id if on_chain else ""
    back: set[str] = set()
    cursor = start
    while cursor and cursor in by_id and cursor not in back:
        back.add(cursor)
        cursor = by_id[cursor].prev or ""
    if anchor is None or not doc.eid:  # no anchor, or a document from before chains
        return back, False
    if not start:
        return back, doc.eid == anchor
    return back, cursor == anchor  # the walk came down to the last processed event: nothing is missing


async def walk_chains(
    redis: Client, keys: Keys, script: Any, states: dict[str, LaneState], *, by_lane: dict[str, list[Pending]],
    known: dict[str, set[str]], limit: int = 256,
) -> None:
    """Walk back from the documents' events that are past the batch (one read-only script
    per partition) and add the genuine ids found to ``known[lane]``.

    A walk stops at the batch's events, the last processed event or an id already known.
    Lanes more than ``limit`` writes ahead are left as they are: their events cannot be
    placed, and the worker catches up to the document instead (one signal for the backlog).
    """
    todo: dict[int, list[tuple[str, list[str]]]] = defaultdict(list)
    for lane, entries in by_lane.items():
        state, ids, seen = states[lane], {e.entry_id for e in entries}, known.get(lane, set())
        doc, tracking = state.doc, state.tracking or LaneTracking()
        if doc is None or not doc.eid or doc.eid in ids or doc.eid in seen or doc.eid == tracking.write_event:
            continue
        if any(e.event.version > tracking.write_version for e in entries):
            stops = [*ids, *seen, *([tracking.write_event] if tracking.write_event else [])]
            todo[entries[0].partition].append((lane, stops))
    if not todo:
        return
    async with redis.pipeline(transaction=False) as pipe:
        for partition, lanes in todo.items():
            items = [{"start": cast(LaneDocument, states[lane].doc).eid, "stops": stops} for lane, stops in lanes]
            await queue_script(pipe, script, [keys.writes(partition)], [limit, encode_json(items)])
        replies = list(await pipe.execute(raise_on_error=False))
    _raise_whole_server(replies)
    for (_, lanes), reply in zip(todo.items(), replies, strict=True):
        if not isinstance(reply, list):
            continue
        for (lane, _), path in zip(lanes, reply, strict=True):
            if path and path[0]:  # reached the batch or a known id: the whole path is genuine
                known.setdefault(lane, set()).update(str(i) for i in path)


def _off_chain(entry: Pending, doc: LaneDocument, complete: bool, genuine_versions: set[int]) -> str | None:
    """Why an event that is not on the lane's chain is a forgery, or ``None`` when it
    cannot be told (it is then acknowledged without a signal of its own)."""
    version = entry.event.version
    if doc.eid and version == doc.version:
        return f"poison: not the write event of version {version} (that is {doc.eid}): not on the lane's chain"
    if version in genuine_versions:
        return f"poison: a second write event for version {version}: not on the lane's chain"
    if complete:
        return f"poison: version {version} is not on the lane's chain of writes"
    return None


def _event_mismatch(event: WriteEvent, doc: LaneDocument) -> str | None:
    """Why an event does not fit its lane's document, or ``None``."""
    if event.version > doc.version:
        return f"poison: version {event.version} is beyond the document's version {doc.version}"
    if event.format != doc.format:
        return f"poison: format {event.format!r} but the document is {doc.format}"
    if event.scope == "thread" and doc.resource_id is not None and event.resource_id != doc.resource_id:
        return f"poison: resource id {event.resource_id!r} does not own thread {doc.thread_id!r}"
    return None


async def run_commits(
    redis: Client, keys: Keys, script: Any, order: list[tuple[int, list[LaneCommit]]], *, keep: int,
    read_ahead: tuple[str, list[str], int] | None = None,
) -> tuple[list[list[list[str]] | Exception], object]:
    """One commit script per partition in one pipeline, plus the read-ahead XREADGROUP
    (``(consumer, streams, count)``) when given. Returns each script's per-lane statuses
    (or its error) and the read-ahead reply (or error)."""
    async with redis.pipeline(transaction=False) as pipe:
        for partition, commits in order:
            script_keys = [keys.writes(partition)]
            for c in commits:
                script_keys += [keys.track(c.lane), keys.signals(c.lane), keys.snapshots(c.lane)]
            await queue_script(pipe, script, script_keys, [GROUP, keep, encode_json([c.payload() for c in commits])])
        if read_ahead is not None:
            consumer, streams, count = read_ahead
            pipe.xreadgroup(GROUP, consumer, dict.fromkeys(streams, ">"), count=count)
        results = list(await pipe.execute(raise_on_error=False))
    ahead: object = results.pop() if read_ahead is not None else None
    _raise_whole_server(results)
    return cast(list[list[list[str]] | Exception], results), ahead


def commit_script(redis: Client) -> Any:
    """The registered commit script."""
    return redis.register_script(lua("commit"))


def in_cluster(redis: Client) -> bool:
    """Whether the client talks to a Redis Cluster."""
    return isinstance(redis, RedisCluster)
