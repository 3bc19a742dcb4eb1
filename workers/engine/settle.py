"""One lane's commit status, settled: what a status from ``commit.lua`` means for the
worker's counts, its tracking cache and its chain links, and whether the lane's events
are planned again (see the statuses in ``signals/streams/lua/commit.lua``'s header)."""

from __future__ import annotations

import time

import msgspec
import structlog

from workers.engine.cache import TrackingCache
from workers.engine.chains import ChainLinks
from workers.engine.commit import BatchStats, LaneCommit, uncount
from workers.engine.counters import METRICS
from workers.engine.lane_state import Pending

__all__ = ("settle",)

log = structlog.get_logger(__name__)


def settle(c: LaneCommit, status: list[str], stats: BatchStats, force: dict[str, str], *, cache: TrackingCache,
           links: ChainLinks) -> list[Pending]:
    """Apply one lane's commit status: count it, remember what was committed (tracking
    cache, chain links) or forget it, and note why a lane is planned anew in ``force``;
    returns its entries when it must be recomputed."""
    if status[0] == "okc":  # counted: entries not pending any more were processed (and counted) elsewhere
        uncount(c.stats, len(c.acks) - int(status[1]))
        status = ["ok", *status[2:]]
    if status[0] == "ok":
        stats.add(c.stats)
        METRICS.committed(c.entries, time.time())
        cache.remember(c.lane, msgspec.structs.replace(c.final, tail=status[1]))
        links.committed(c.lane, c.entries, status[2:])
        return []
    if status[0] == "unverified":  # the steady-state guess was wrong: plan it from its document
        stats.unverified += 1
        force[c.lane] = status[0]
        return c.entries
    cache.forget(c.lane)
    if status[0] == "conflict":
        stats.conflicts += 1
    elif status[0] == "adopted":  # signals of a half-done commit became its tracking: planned anew
        log.warning("worker.tracking_repaired", lane=c.lane,
                    note="signals appended without their tracking (a commit failed after its first write)")
    else:  # "resnap" or "type": the lane's own keys are not what the tracking says
        force[c.lane] = status[0]
        log.warning("worker.lane_check_failed", lane=c.lane, status=status[0], detail=status[1:])
    return c.entries
