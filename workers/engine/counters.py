"""The worker's metric state: plain process-wide counters, histograms and gauges.

What it does: :data:`METRICS` is the process's only metric state (no per-lane state).
The worker's hot path adds already-computed numbers to it (a batch's
:class:`~workers.engine.commit.BatchStats`, the entry ids it committed); :meth:`WorkerMetrics.vector`
flattens it into floats in :class:`Layout`'s order, for :mod:`workers.ops.metrics` (the
Prometheus families) and :mod:`workers.ops.health` (the shared-memory board).

Why plain numbers and not prometheus-client's ``Counter``/``Histogram``: those take a
lock per increment (in multiprocess mode they write an mmap'd file per increment); a
histogram observation per write event would cost several percent of throughput. And
why a module of its own: the consumer imports it, and every CLI command imports the
consumer; prometheus-client is imported only by the processes that expose metrics.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.engine.commit import BatchStats
    from workers.engine.lane_state import Pending

__all__ = (
    "BATCH_BUCKETS", "COUNTERS", "LATENCY_BUCKETS", "METRICS", "MODES", "OUTCOMES", "PREFIX", "REASONS", "Histogram",
    "Layout", "WorkerMetrics", "dead_letter_reason",
)

PREFIX = "wm_signals_"
#: ``wm_signals_events_total{outcome}``: what became of each write event a worker processed.
OUTCOMES = ("signalled", "deduplicated", "superseded", "caught_up", "dead_lettered", "retried")
MODES = ("snapshot", "delta")
#: Dead-letter reason classes: a bad event, one that failed ``max_attempts`` times, a
#: lane whose keys in Redis are corrupt (a document of the wrong type, say).
REASONS = ("poison", "attempts", "corrupt")
#: Seconds one batch takes (decode, compute, commit): ~1 ms idle to seconds under contention.
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Seconds from a write (its stream id's timestamp) to its commit: milliseconds when the
#: worker keeps up, minutes for a backlog.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   300.0, 1800.0)
COUNTERS = ("dedup_skips", "commit_conflicts", "reclaimed_entries", "reconnects", "lanes_compacted",
            "compaction_entries_removed", "reconciled_lanes")


def dead_letter_reason(error: str) -> str:
    """The reason class of a dead letter from its recorded reason (see :data:`REASONS`)."""
    if error.startswith("failed "):
        return "attempts"
    if error.startswith(("poison: corrupt ", "corrupt ")):
        return "corrupt"
    return "poison"


class Histogram:
    """A cumulative-on-exposition histogram: per-bucket counts (the last is +Inf) and a sum.

    Not thread-safe by design: the worker's event loop is its only writer; readers
    copy it (:meth:`WorkerMetrics.vector`) and tolerate a batch half-applied.
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count one observation (``le`` semantics: a value equal to a bound is in its bucket)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class WorkerMetrics:
    """The process's metric state; the hot path touches it only through cheap methods."""

    def __init__(self, partitions: int = 0) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.modes = dict.fromkeys(MODES, 0)
        self.reasons = dict.fromkeys(REASONS, 0)
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.batch = Histogram(BATCH_BUCKETS)
        self.write_to_commit = Histogram(LATENCY_BUCKETS)
        self._latency_ms = tuple(b * 1000.0 for b in LATENCY_BUCKETS)
        self.up = 0
        #: read loops backing off from a Redis that is unreachable or refusing work: ``up`` reads 0 meanwhile
        self.stalled: set[object] = set()
        self.lag = [0.0] * partitions
        self.pending = [0.0] * partitions
        self.dead_letter_length = 0.0
        self.gauges_at = 0.0  # monotonic time the Redis-read gauges were last refreshed (0: never)
        #: read loop (or start-up) -> monotonic time it last made progress (see :meth:`progress`)
        self.marks: dict[object, float] = {}
        self.started = time.monotonic()

    def resize(self, partitions: int) -> None:
        """Size the per-partition gauges (once, when the worker knows its partition count)."""
        if len(self.lag) != partitions:
            self.lag = [0.0] * partitions
            self.pending = [0.0] * partitions

    def record_batch(self, stats: BatchStats, seconds: float) -> None:
        """Add one processed batch: its events' outcomes, signals, skips and conflicts."""
        o = self.outcomes
        o["signalled"] += stats.signalled
        o["deduplicated"] += stats.deduplicated
        o["superseded"] += stats.superseded
        o["caught_up"] += stats.caught_up
        o["dead_lettered"] += stats.dead_letters
        o["retried"] += stats.retried
        self.modes["snapshot"] += stats.snapshots
        self.modes["delta"] += stats.deltas
        self.counters["dedup_skips"] += stats.dedup_skips
        self.counters["commit_conflicts"] += stats.conflicts
        self.batch.observe(seconds)

    def committed(self, entries: Iterable[Pending], now: float) -> None:
        """Observe write-to-commit seconds of committed entries: ``now`` (wall clock, s)
        minus each entry's stream id time (Redis's clock when the write was appended; a
        negative difference, from clocks apart, counts as 0)."""
        hist = self.write_to_commit
        counts, bounds = hist.counts, self._latency_ms
        now_ms = now * 1000.0
        total = 0.0
        for entry in entries:  # Histogram.observe inlined: this runs once per event
            eid = entry.entry_id
            if eid.startswith("0-"):  # a reconciliation's catch-up (workers.engine.reconcile), no write's entry
                continue
            ms = now_ms - int(eid[:eid.index("-")])
            ms = ms if ms > 0 else 0.0
            counts[bisect_left(bounds, ms)] += 1
            total += ms
        hist.total += total / 1000.0

    def dead_lettered(self, error: str) -> None:
        """Count one dead letter by its reason class."""
        self.reasons[dead_letter_reason(error)] += 1

    def add(self, counter: str, n: int = 1) -> None:
        """Add to one of the plain counters (``reclaimed_entries``, ``reconnects``, ...)."""
        self.counters[counter] += n

    def mark(self, loop: object, now: float | None = None) -> None:
        """Record that a read loop (or the start-up) made progress."""
        self.marks[loop] = time.monotonic() if now is None else now

    def unmark(self, loop: object) -> None:
        """Forget a loop that ended (a stopping worker then gets one liveness bound to exit)."""
        if self.marks.pop(loop, None) is not None and not self.marks:
            self.started = time.monotonic()

    def progress(self) -> float:
        """The monotonic time of the least recent progress over the running loops (when
        none runs: the process's start, or when the last loop ended): liveness compares
        it with a bound."""
        return min(self.marks.values(), default=self.started)

    def vector(self, layout: Layout) -> list[float]:
        """Every value, flattened in ``layout``'s order (see :class:`Layout`)."""
        out: list[float] = [*self.outcomes.values(), *self.modes.values(), *self.reasons.values(),
                            *self.counters.values(), *self.batch.counts, self.batch.total,
                            *self.write_to_commit.counts, self.write_to_commit.total,
                            float(self.up and not self.stalled), self.dead_letter_length, self.gauges_at]
        lag, pending = self.lag, self.pending
        n = layout.partitions
        out += (lag + [0.0] * n)[:n]
        out += (pending + [0.0] * n)[:n]
        return out


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each value sits in a metrics vector, for a partition count."""

    partitions: int

    @property
    def size(self) -> int:
        """Floats per vector."""
        return self.gauges + 3 + 2 * self.partitions

    @property
    def counters(self) -> int:
        return len(OUTCOMES) + len(MODES) + len(REASONS) + len(COUNTERS)

    @property
    def gauges(self) -> int:
        return self.counters + len(BATCH_BUCKETS) + 2 + len(LATENCY_BUCKETS) + 2


#: The process-wide metrics (a worker process runs one consumer; tests that run several
#: in one process see their sum, as a scrape of that process would).
METRICS = WorkerMetrics()
