"""The worker's Prometheus metrics: one process-wide set of plain counters, exposed
through a prometheus-client collector.

What it does: :data:`METRICS` is the process's only metric state (no per-lane state:
every label is bounded, ``partition`` by the partition count). The worker's hot path
adds already-computed numbers to it (a batch's :class:`~workers.commit.BatchStats`, the
entry ids it committed); :meth:`WorkerMetrics.vector` flattens it into a list of floats
(the layout of :class:`Layout`), and :class:`MetricsCollector` turns one or more such
vectors (one per worker process) into Prometheus metric families for
``prometheus_client.generate_latest``.

Why plain counters and not prometheus-client's ``Counter``/``Histogram`` objects: those
take a lock per increment and, in multiprocess mode, write an mmap'd file per
increment; a histogram observation per write event would cost the worker several
percent of its throughput. Here a batch costs a few integer additions, and a write's
write-to-commit latency one ``bisect`` into a list. The vectors travel to the process
serving ``/metrics`` through shared memory (:mod:`workers.health`), which also makes
``--processes N`` one endpoint: counters and histograms are summed over processes.

What it does not do: no I/O, no Redis, no HTTP (see :mod:`workers.health` and
:mod:`workers.ops_server`). Gauges read from Redis (lag, pending, dead-letter stream
length) are set here by the worker's monitor task, not by the hot path.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from workers.commit import BatchStats
    from workers.lane_state import Pending

__all__ = (
    "BATCH_BUCKETS", "LATENCY_BUCKETS", "METRICS", "MODES", "OUTCOMES", "PREFIX", "REASONS", "REGISTRY", "Histogram",
    "Layout", "MetricsCollector", "Source", "WorkerMetrics", "dead_letter_reason", "version",
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
_COUNTERS = ("dedup_skips", "commit_conflicts", "reclaimed_entries", "reconnects")


def version() -> str:
    """The installed wm-signals version, or ``unknown`` when running from a source tree."""
    from importlib.metadata import PackageNotFoundError  # noqa: PLC0415 - only for build_info
    from importlib.metadata import version as dist_version  # noqa: PLC0415

    try:
        return dist_version("wm-signals")
    except PackageNotFoundError:
        return "unknown"


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
        self.counters = dict.fromkeys(_COUNTERS, 0)
        self.batch = Histogram(BATCH_BUCKETS)
        self.write_to_commit = Histogram(LATENCY_BUCKETS)
        self._latency_ms = tuple(b * 1000.0 for b in LATENCY_BUCKETS)
        self.up = 0
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
                            float(self.up), self.dead_letter_length, self.gauges_at]
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
        return len(OUTCOMES) + len(MODES) + len(REASONS) + len(_COUNTERS)

    @property
    def gauges(self) -> int:
        return self.counters + len(BATCH_BUCKETS) + 2 + len(LATENCY_BUCKETS) + 2


#: The process-wide metrics (a worker process runs one consumer; tests that run several
#: in one process see their sum, as a scrape of that process would).
METRICS = WorkerMetrics()


#: What a collector reads at each scrape: the vectors' layout and one vector per process.
Source = Callable[[], tuple[Layout, list[list[float]]]]


class MetricsCollector(Collector):
    """Prometheus families from the vectors of one or more worker processes.

    Counters and histograms are summed over the vectors; the gauges read from Redis
    (lag, pending, dead-letter length) come from the most recently refreshed vector
    (every process reads the same Redis) and have no samples until one was read (no
    made-up zeros); ``up`` is 1 only when every process's read loop runs.
    """

    def __init__(self, source: Source, build_version: str) -> None:
        self._source = source
        self._version = build_version
        self.layout = Layout(0)

    def collect(self) -> Iterator[Metric]:
        self.layout, vectors = self._source()
        n = self.layout.size
        total = [sum(v[i] for v in vectors) for i in range(self.layout.gauges)] if vectors else [0.0] * n
        it = iter(total)

        def take(k: int) -> list[float]:
            return [next(it) for _ in range(k)]

        events = CounterMetricFamily(PREFIX + "events", "Write events processed, by outcome.", labels=["outcome"])
        for name, value in zip(OUTCOMES, take(len(OUTCOMES)), strict=True):
            events.add_metric([name], value)
        modes = CounterMetricFamily(PREFIX + "signals_emitted", "State signals emitted, by mode.", labels=["mode"])
        for name, value in zip(MODES, take(len(MODES)), strict=True):
            modes.add_metric([name], value)
        reasons = CounterMetricFamily(PREFIX + "dead_letters", "Events moved to a dead-letter stream, by reason "
                                      "class.", labels=["reason"])
        for name, value in zip(REASONS, take(len(REASONS)), strict=True):
            reasons.add_metric([name], value)
        yield from (events, modes, reasons)
        helps = {"dedup_skips": "Signals not emitted because the cacheKey was unchanged.",
                 "commit_conflicts": "Lane commits refused because another worker committed the lane first.",
                 "reclaimed_entries": "Pending entries of idle consumers claimed (XAUTOCLAIM).",
                 "reconnects": "Times a read loop got Redis back after losing it."}
        for name, value in zip(_COUNTERS, take(len(_COUNTERS)), strict=True):
            yield CounterMetricFamily(PREFIX + name, helps[name], value=value)
        yield _histogram("batch_duration_seconds", "Seconds to process one batch of write events.",
                         BATCH_BUCKETS, take(len(BATCH_BUCKETS) + 2))
        yield _histogram("write_to_commit_seconds", "Seconds from a write's stream id time to its commit.",
                         LATENCY_BUCKETS, take(len(LATENCY_BUCKETS) + 2))
        yield from self._gauges(vectors)

    def _gauges(self, vectors: list[list[float]]) -> Iterator[Metric]:
        g = self.layout.gauges
        p = self.layout.partitions
        up = min((v[g] for v in vectors), default=0.0)
        fresh = max(vectors, key=lambda v: v[g + 2], default=None)
        yield GaugeMetricFamily(PREFIX + "up", "1 while the worker's read loop runs (every process's).", value=up)
        info = GaugeMetricFamily(PREFIX + "build_info", "The wm-signals version (value 1).", labels=["version"])
        info.add_metric([self._version], 1.0)
        yield info
        length = GaugeMetricFamily(PREFIX + "dead_letter_stream_length", "Entries in the dead-letter streams.",
                                   labels=[])
        lag = GaugeMetricFamily(PREFIX + "stream_lag", "Write stream entries not yet delivered to the group.",
                                labels=["partition"])
        pending = GaugeMetricFamily(PREFIX + "stream_pending", "Write stream entries delivered, not acknowledged.",
                                    labels=["partition"])
        if fresh is not None and fresh[g + 2] != 0:  # not read from Redis yet: families without samples
            length.add_metric([], fresh[g + 1])
            for i in range(p):
                lag.add_metric([str(i)], fresh[g + 3 + i])
                pending.add_metric([str(i)], fresh[g + 3 + p + i])
        yield from (length, lag, pending)


def _this_process() -> tuple[Layout, list[list[float]]]:
    layout = Layout(len(METRICS.lag))
    return layout, [METRICS.vector(layout)]


#: The process-wide registry: this process's :data:`METRICS` as Prometheus families (for
#: a program that runs :func:`workers.supervisor.run_worker` itself and serves its own
#: endpoint). ``wm-signals worker`` serves the shared-memory board instead (the same
#: families, summed over its processes, see :mod:`workers.ops_server`).
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(MetricsCollector(_this_process, version()))


def _histogram(name: str, doc: str, bounds: Sequence[float], values: list[float]) -> HistogramMetricFamily:
    counts, total = values[:-1], values[-1]
    cumulative: list[tuple[str, float]] = []
    running = 0.0
    for bound, count in zip([*(_le(b) for b in bounds), "+Inf"], counts, strict=True):
        running += count
        cumulative.append((bound, running))
    return HistogramMetricFamily(PREFIX + name, doc, buckets=cumulative, sum_value=total)


def _le(bound: float) -> str:
    return repr(float(bound))
