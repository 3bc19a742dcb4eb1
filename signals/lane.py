"""A lane's signal numbering in the pipeline: tracking state and one step of it. Pure.

The worker owns a lane's signals: it numbers them 1, 2, 3... and emits nothing for an
unchanged document (dedup by cacheKey). The lane's signal stream always holds its last
snapshot, so the decision runs with the snapshot "in the window"; the delta base is the
last signal's full text. Every ``snapshot_every``-th signal is a snapshot instead of a
delta (no extra signal), which bounds how far a subscriber that starts from the stream's
oldest retained snapshot must replay. Agent loops re-inject snapshots into their own
windows; that is a delivery, not a new lane version (see ``signals.window``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from signals._time import now_iso
from signals.models import Signal, WriteEvent
from signals.processor import Policy, decide

__all__ = ("LaneOptions", "LaneTracking", "advance")


class LaneTracking(msgspec.Struct, frozen=True, gc=False):
    """What the worker remembers of a lane (stored in Redis, not in the worker).

    Attributes:
        version: the lane's last signal version (0: no signal yet).
        cache_key: the cacheKey of the last signal.
        mode: the mode of the last signal.
        write_version: the last document version processed (signal or not).
        value: the full text after the last signal: the next delta's base (kept by the
            worker, not stored in the tracking hash).
        since_snapshot: signals since (and including) the last snapshot.

    A msgspec Struct with ``gc=False`` (it holds only ints and strings, so it can never be
    part of a reference cycle): the worker caches thousands of them, and untracked objects
    keep the cyclic collector's pauses out of the signal latency.
    """

    version: int = 0
    cache_key: str = ""
    mode: str = ""
    write_version: int = 0
    value: str = ""
    since_snapshot: int = 0

    @classmethod
    def from_fields(cls, fields: list[str | None], value: str = "") -> LaneTracking:
        """From ``HMGET trk v ck mode wv n`` and the lane's current text."""
        v, ck, mode, wv, n = fields
        return cls(int(v or 0), ck or "", mode or "", int(wv or 0), value, int(n or 0))

    def to_args(self) -> list[str | int]:
        """The positional values the commit script stores (``v ck mode wv n``).

        ``value`` is not stored in the tracking: it is the last signal's ``value`` (or is
        rebuilt from the stream), so Redis holds each text once per lane stream.
        """
        return [self.version, self.cache_key, self.mode, self.write_version, self.since_snapshot]


@dataclass(frozen=True, slots=True)
class LaneOptions:
    """How a worker shapes a lane's signals."""

    policy: Policy = "compact"
    snapshot_every: int = 20
    omit_delta_value: bool = False


def advance(
    tracking: LaneTracking, event: WriteEvent, options: LaneOptions, *, now: str | None = None
) -> tuple[LaneTracking, Signal | None]:
    """Process one write event: the new tracking and the signal to emit, if any.

    ``now`` is the ``emittedAt`` stamp (a batch shares one); the current time by default.

    An event at or below the processed write version is a duplicate or was superseded
    by a newer write already signalled: nothing is emitted for it.
    """
    if event.version <= tracking.write_version:
        return tracking, None
    has = tracking.version > 0
    proposal = decide(
        data=event.data,
        fmt=event.format,
        scope=event.scope,
        has_snapshot=has,
        current_cache_key=tracking.cache_key or None,
        prior=tracking.value if has else None,
        policy=options.policy,
        force_snapshot=tracking.since_snapshot >= options.snapshot_every,
    )
    if proposal is None:
        return msgspec.structs.replace(tracking, write_version=event.version), None
    version = tracking.version + 1
    delta = proposal.mode == "delta"
    signal = Signal(
        id="working-memory",
        mode=proposal.mode,
        cache_key=proposal.cache_key,
        tag_name="working-memory",
        contents=proposal.contents,
        delta=proposal.delta,
        value=None if delta and options.omit_delta_value else proposal.value,
        attributes=proposal.attributes,
        version=version,
        lane=event.lane,
        resource_id=event.resource_id,
        thread_id=event.thread_id if event.scope == "thread" else None,
        emitted_at=now or now_iso(),
        base_version=tracking.version if delta else None,
        write_version=event.version,
    )
    new = LaneTracking(
        version=version,
        cache_key=proposal.cache_key,
        mode=proposal.mode,
        write_version=event.version,
        value=proposal.value,
        since_snapshot=tracking.since_snapshot + 1 if delta else 1,
    )
    return new, signal
