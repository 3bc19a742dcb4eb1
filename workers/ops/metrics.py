"""The worker's Prometheus metrics: the families of the contract, from the process-wide
counters of :mod:`workers.engine.counters`.

What it does: :class:`MetricsCollector` turns one or more metric vectors (one per worker
process, see :meth:`workers.engine.counters.WorkerMetrics.vector`) into Prometheus metric
families for ``prometheus_client.generate_latest``; :data:`REGISTRY` is the
process-wide registry of this process's own metrics. ``--processes N`` serves one
endpoint because the vectors travel through shared memory (:mod:`workers.ops.health`):
counters and histograms are summed over processes.

What it does not do: no I/O, no Redis, no HTTP (see :mod:`workers.ops.health` and
:mod:`workers.ops.server`). Gauges read from Redis (lag, pending, dead-letter stream
length) are set by the worker's monitor task, not by the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from workers.engine.counters import (
    BATCH_BUCKETS,
    COUNTERS,
    LATENCY_BUCKETS,
    METRICS,
    MODES,
    OUTCOMES,
    PREFIX,
    REASONS,
    Histogram,
    Layout,
    WorkerMetrics,
    dead_letter_reason,
)

__all__ = (
    "BATCH_BUCKETS", "LATENCY_BUCKETS", "METRICS", "MODES", "OUTCOMES", "PREFIX", "REASONS", "REGISTRY", "Histogram",
    "Layout", "MetricsCollector", "Source", "WorkerMetrics", "dead_letter_reason", "version",
)


def version() -> str:
    """The installed wm-signals version, or ``unknown`` when running from a source tree."""
    from importlib.metadata import PackageNotFoundError  # noqa: PLC0415 - only for build_info
    from importlib.metadata import version as dist_version  # noqa: PLC0415

    try:
        return dist_version("wm-signals")
    except PackageNotFoundError:
        return "unknown"


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
                 "reconnects": "Times a read loop got Redis back after losing it.",
                 "lanes_compacted": "Idle lanes compacted to one snapshot by the maintenance.",
                 "compaction_entries_removed": "Signal stream entries removed by compaction.",
                 "reconciled_lanes": "Lanes signalled up to their document after their write event was trimmed "
                                     "from the write stream, or re-snapshotted past a foreign tail of "
                                     "their signal stream."}
        for name, value in zip(COUNTERS, take(len(COUNTERS)), strict=True):
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
        yield GaugeMetricFamily(PREFIX + "up", "1 while every read loop of the worker reads (0 while one backs off "
                                "from a Redis that is unreachable or refuses work).", value=up)
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
#: a program that runs :func:`workers.runtime.worker.run_worker` itself and serves its own
#: endpoint). ``wm-signals worker`` serves the shared-memory board instead (the same
#: families, summed over its processes, see :mod:`workers.ops.server`).
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
