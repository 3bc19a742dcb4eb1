"""The lane commit protocol: place each event on its lane's chain, compute the signals,
commit atomically.

:func:`plan_lane` checks a lane's events against its document and its chain of genuine
writes (:func:`event_chain`): an event on the chain is signalled with its own text; one
that contradicts the chain or the document (beyond its version, another format or owner,
a second event for a version, off a whole chain) is dead-lettered; one that cannot be
placed is acknowledged and the document's current version signalled instead (a
catch-up); a lane under repair gets one snapshot. :func:`workers.engine.commit_call.run_commits`
then runs the commit script over the partitions (signal XADD + tracking + XACK, atomic per lane), which checks key
types, compare-and-sets on the tracking and checks the signal stream still ends at the
tracked signal; a lane that fails a check comes back with a status and is recomputed.
Whole-server errors (unreachable, out of memory, loading, read-only) propagate to the
supervisor, which backs off and retries.

The steady state skips reading the documents: when a lane's events in the batch simply
extend the chain the worker last committed (:func:`steady_document`), the lane is planned
against the document they imply, and the commit script checks, atomically with the
commit, that the document index agrees (:func:`steady_check`). A lane whose check fails
is written not at all and comes back ``unverified``, to be planned from its document.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from signals.core.codec import encode_signal
from signals.core.lane import LaneDocument, LaneOptions, LaneTracking, advance
from signals.core.models import WriteEvent
from signals.core.signing import Signer
from signals.core.wire import lane_owner_id
from signals.streams.keys import Keys
from workers.engine.lane_state import LaneState, Pending

__all__ = ("BatchStats", "LaneCommit", "event_chain", "plan_lane", "plan_steady", "steady_check", "steady_document",
           "uncount")

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
    # what became of each event (the metrics' outcomes): its own signal, an unchanged
    # cacheKey, already covered by the processed version, covered by the document's
    # version signalled instead (catch-up, repair); a failure to be retried
    signalled: int = 0
    deduplicated: int = 0
    superseded: int = 0
    caught_up: int = 0
    retried: int = 0
    dedup_skips: int = 0  # signals not emitted for an unchanged cacheKey (events and catch-ups)
    unverified: int = 0
    """Steady-state commits whose document check failed (the lane was planned again from its document)."""

    def add(self, other: BatchStats) -> None:
        """Accumulate another batch's counters (once per committed lane: only the few that
        are not zero are touched)."""
        for name, value in zip(self.__slots__, _COUNTERS(other), strict=True):
            if value:
                setattr(self, name, getattr(self, name) + value)


_COUNTERS = operator.attrgetter(*BatchStats.__slots__)  # every counter of a BatchStats, in slot order


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
    check: dict[str, Any] | None = None
    """What a steady-state plan assumed of the document (see :func:`steady_check`)."""
    count_acks: bool = False
    """Acknowledge this lane's entries on their own and return how many were still pending:
    set when some are of versions processed already (superseded), which another worker
    may have processed (and counted) too: a reclaimed entry, or a lane committed first
    elsewhere."""

    def payload(self) -> dict[str, Any]:
        """The lane's item in the commit script's plan argument (fields by name; a field at
        its default is left out: the script reads it as absent)."""
        state = self.state
        check_tail = state.tracking is not None and not state.resnap and not state.repair
        final = self.final
        out: dict[str, Any] = {
            "expected": state.expected,
            "expected_v": state.expected_version,
            "tail": state.tracking.tail if check_tail and state.tracking else False,
            "fields": final.fields(),  # the tracking hash to store; the script adds the tail
            "version": final.version,
            "tail_before": final.tail,
            "signals": len(self.signals),  # the texts travel as arguments of their own (see run_commits)
            "acks": self.acks,
        }
        if state.repair is not None:
            out["repair"] = 1
        if state.reset:
            out["reset"] = 1
        if any(self.macs):
            out["macs"] = self.macs
        if any(self.snapshots):
            out["snapshot"] = self.snapshots
        if self.check:
            out["check"] = self.check
        if self.count_acks:
            out["count"] = 1
        return out


def plan_lane(
    lane: str, state: LaneState, entries: list[Pending], *, options: LaneOptions, now: str, signer: Signer | None,
    known: Mapping[str, str] | None = None,
) -> tuple[LaneCommit, list[tuple[Pending, str]]] | None:
    """Check the lane's events against its document and event chain; compute its signals.

    An event on the lane's chain (see :func:`event_chain`) is signalled with its own text;
    an event at the document's version with the document's; an event that cannot be
    placed on the chain (the chain runs past this batch, or the event or the document
    carries no link) is acknowledged without a signal, and the document's current version is
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
            commit.stats.superseded += event.version <= tracking.write_version
            commit.stats.caught_up += event.version > tracking.write_version
            continue
        before = len(commit.signals)  # an event on the chain carries its version's text
        tracking = _emit(commit, tracking, event, pending.entry_id, options=options, now=now, signer=signer)
        emitted = len(commit.signals) > before
        commit.stats.skipped += not emitted  # unchanged cacheKey: deduplicated
        commit.stats.deduplicated += not emitted
        commit.stats.signalled += emitted
    if catch_up and (forced or tracking.write_version < doc.version):
        if doc.data is None:
            return None
        if forced:
            tracking = msgspec.structs.replace(tracking, value=None,
                                               write_version=min(tracking.write_version, doc.version - 1))
        tracking = _emit(commit, tracking, doc.event(), doc.eid, options=options, now=now, signer=signer)
    if poison:  # else every entry is acknowledged
        acked = set(commit.acks)
        commit.entries = [pending for pending in entries if pending.entry_id in acked]
    commit.final = tracking
    return commit, poison


def steady_document(lane: str, entries: list[Pending], tracking: LaneTracking) -> LaneDocument | None:
    """The document a lane's batch implies in the steady state, or ``None`` when it is not.

    The steady state: ``entries`` (sorted by version) follow one another from the last
    event the worker committed, each naming the one before it (field ``p``) with a
    higher version, all of one format and owner. Were they genuine, the document would be
    at the newest of them; :func:`plan_lane` against that document then signals each of
    them, exactly as against the real one. Nothing here is trusted: a forged event can
    name any ``p``. The commit script checks the real document (:func:`steady_check`) and
    commits nothing of the lane when it disagrees.
    """
    prev, version = tracking.write_event, tracking.write_version
    if not prev:
        return None
    first = entries[0].event
    for pending in entries:
        event = pending.event
        if (pending.prev != prev or event.version <= version or event.format != first.format
                or event.resource_id != first.resource_id):
            return None
        prev, version = pending.entry_id, event.version
    thread_id = first.thread_id if first.scope == "thread" else None
    return LaneDocument(lane, None, version, first.format, first.scope, first.resource_id, thread_id, prev)


def plan_steady(
    lane: str, doc: LaneDocument, tracking: LaneTracking, entries: list[Pending], *, options: LaneOptions, now: str,
    signer: Signer | None,
) -> LaneCommit:
    """:func:`plan_lane` for a batch that :func:`steady_document` accepted, against the
    document it returned: the same commit, without the checks that cannot fail there.

    Against that document no event is refused (its version is the batch's highest, its
    format and owner the events'), every event is on the chain (the document names the
    newest, each names the one before, the first names the tracked event) and each is
    past the tracked write version (versions increase from it): each is acknowledged and
    advances the lane. A unit test holds the two equal.
    """
    commit = LaneCommit(lane, LaneState(doc=doc, tracking=tracking, expected=str(tracking.write_version or ""),
                                        expected_version=str(tracking.version)), entries)
    for pending in entries:
        commit.acks.append(pending.entry_id)
        before = len(commit.signals)
        tracking = _emit(commit, tracking, pending.event, pending.entry_id, options=options, now=now, signer=signer)
        emitted = len(commit.signals) > before
        commit.stats.skipped += not emitted  # unchanged cacheKey: deduplicated
        commit.stats.deduplicated += not emitted
        commit.stats.signalled += emitted
    commit.final = tracking
    return commit


def steady_check(keys: Keys, doc: LaneDocument, head: str | None) -> dict[str, Any]:
    """What the commit script verifies of a lane planned against :func:`steady_document`.

    Its document hash (not the partition's index, which writers may set to anything) must
    be of the events' format at or past their version, a thread lane's owner record must
    name the events' resource, and the chain walked back from the document's event must
    reach the batch's newest event, or ``head`` (an id an earlier walk found on the chain,
    given only when that walk placed the batch's events), within a few steps. Then the
    batch's events are the lane's genuine writes and the plan is the one the careful path
    would make.
    """
    check: dict[str, Any] = {"doc": keys.doc(doc.lane), "version": doc.version, "format": doc.format,
                             "stops": [doc.eid, head] if head else [doc.eid]}
    if doc.scope == "thread":
        check["thread"], check["owner"] = keys.thread(lane_owner_id(doc.lane)), doc.resource_id
    return check


def _emit(
    commit: LaneCommit, tracking: LaneTracking, event: WriteEvent, event_id: str, *, options: LaneOptions, now: str,
    signer: Signer | None,
) -> LaneTracking:
    """Advance the lane by one (trusted) event; queue the signal, if any, in the commit.

    When the key that signed the lane's last signal is not this worker's signing key (a
    rotation, or signing turned on or off), the signal is a snapshot even of an unchanged
    text: readers then hold a chain under the new key from its next write on.
    """
    kid = signer.key_id if signer else ""
    rekeyed = tracking.version > 0 and tracking.key_id != kid
    basis = msgspec.structs.replace(tracking, value=None) if rekeyed else tracking  # no base: a snapshot, no dedup
    final, signal = advance(basis, event, options, now=now)
    final = msgspec.structs.replace(final, tail=tracking.tail, write_event=event_id,
                                    key_id=kid if signal is not None else tracking.key_id)
    if signal is None:
        commit.stats.dedup_skips += 1
        return final
    payload = encode_signal(signal)
    snapshot = signal.mode == "snapshot"
    commit.signals.append(payload)
    commit.macs.append(signer.mac(commit.lane, payload) if signer else "")
    commit.snapshots.append(int(snapshot))
    commit.stats.signals += 1
    commit.stats.snapshots += snapshot
    commit.stats.deltas += not snapshot
    return final


def event_chain(
    entries: list[Pending], doc: LaneDocument, tracking: LaneTracking, known: Mapping[str, str] | None = None
) -> tuple[set[str], bool]:
    """The ids of the batch's events that are on the lane's chain of genuine writes, and
    whether the chain from the document's event down to the worker's last processed event
    is whole (then an event off the chain, past the processed version, is a forgery).

    The write script gives every event the id of the lane's previous event (``p``) and
    records its own in the document (``eid``): walking back from the document's event
    follows genuine events only (an appended forgery can name any ``p``, but no genuine
    event or document names the forgery). The walk steps through the batch's events and
    through ``known``: links (genuine event id -> the id its ``p`` names) that chain walks
    on the stream found (:func:`workers.engine.chains.walk_chains`), for the stretch between
    the document and the batch that the batch does not hold.

    Whole means the walk itself came down to the tracked event, link by link: ids found
    genuine by some earlier walk are not enough. They outlive that walk (made from an
    older document), so the newest of them in a batch need not be the batch's newest
    genuine event; taking it for that would make genuine events of a batch the walk from the
    document did not reach (over 256 writes behind; an id a concurrent batch had walked)
    look like forgeries (``tests/trust_boundary/test_chain_placement.py``).
    """
    by_id = {e.entry_id: e for e in entries}
    links = known or {}
    anchor = tracking.write_event if tracking.write_event or not tracking.write_version else None
    back: set[str] = set()
    cursor = doc.eid
    for _ in range(len(by_id) + len(links) + 1):  # genuine links go back in the stream: no cycle, but bounded
        if not cursor or cursor == anchor:
            break
        if cursor in by_id:
            back.add(cursor)
            cursor = by_id[cursor].prev or ""
        elif cursor in links:
            cursor = links[cursor]
        else:
            break
    if anchor is None or not doc.eid:  # no anchor, or a document that names no event
        return back, False
    return back, cursor == anchor  # the walk came down to the last processed event: nothing is missing


def _off_chain(entry: Pending, doc: LaneDocument, complete: bool, genuine_versions: set[int]) -> str | None:
    """Why an event that is not on the lane's chain is a forgery, or ``None`` when it
    cannot be told (it is then acknowledged without a signal of its own, and the lane
    catches up to its document).

    An event put back by ``dlq requeue`` is off the chain by construction (its id is new):
    it is the operator's request to bring the lane up to its document, whose own text is
    what gets signalled, never the event's. (A forged event marked as requeued gains
    nothing: it can only make a worker signal the genuine document.)
    """
    if entry.requeued:
        return None
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


def uncount(stats: BatchStats, gone: int) -> None:
    """Take ``gone`` events another worker acknowledged (and counted) out of a lane's
    outcome counts: they are counted where they were processed first. Such events were
    skipped here (their versions were processed already)."""
    gone = min(gone, stats.skipped)
    stats.skipped -= gone
    for name in ("superseded", "deduplicated", "caught_up"):
        taken = min(gone, getattr(stats, name))
        setattr(stats, name, getattr(stats, name) - taken)
        gone -= taken
