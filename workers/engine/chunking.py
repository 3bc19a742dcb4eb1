"""Chunked, overlapping commits: how a worker splits a batch so that Redis commits one
part while the worker plans the next.

Planning is the worker's CPU and committing is Redis's. A batch of at least
``2 * CHUNK_EVENTS`` events is split into chunks of whole partitions (:func:`chunks`);
each chunk's commit runs as a task of its own (:class:`ChunkCommits`) as soon as the
chunk is planned. Chunks hold disjoint lanes, so no plan depends on another chunk's
commit. This module knows nothing of how a lane is planned or committed: the consumer
(:mod:`workers.engine.consumer`) hands it the two steps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar, cast

import anyio.lowlevel

from workers.engine.commit import BatchStats, LaneCommit
from workers.engine.lane_state import Pending

__all__ = ("CHUNK_EVENTS", "MAX_CHUNKS", "ChunkCommits", "PlanCareful", "chunked", "chunks", "let_send")

#: Events per chunk (see :func:`chunks`): below twice this, a batch's lanes are one chunk.
#: Small: a batch of a few hundred events (10,000 writes/s read every few tens of ms)
#: committed as one call makes the worker wait for Redis as long as it planned (traced:
#: over half its time); in chunks of 50 Redis commits one while the next is planned
#: (bench/bench_latency.py's load: p50 and p99 at 10,000/s about halved).
CHUNK_EVENTS = 50
MAX_CHUNKS = 4
#: Scheduler passes granted to a chunk's commit task before planning goes on: enough for
#: redis-py to send the pipeline on a pooled connection (it then awaits the reply). Too
#: few only costs the overlap, never correctness.
SEND_PASSES = 4


_T = TypeVar("_T", bound=tuple[object, ...])
_P = TypeVar("_P")  # what a commit reads ahead (the consumer's prefetch)


def chunked(items: Sequence[tuple[object, ...]]) -> bool:
    """Whether a batch of lanes (items whose second element is the lane's events) is worth
    chunks: at least ``2 * CHUNK_EVENTS`` events."""
    return sum(len(_events(item)) for item in items) >= 2 * CHUNK_EVENTS


def chunks(lanes: list[_T]) -> list[list[_T]]:
    """Split lanes (items whose second element is the lane's events) into at most
    :data:`MAX_CHUNKS` chunks of whole partitions (in partition order), of about equal
    events, each at least :data:`CHUNK_EVENTS`: the chunks of one list never share a
    partition. (A pass chunks its careful and its steady lanes apart, so a careful and a
    steady chunk may: harmless, as each lane is committed by one atomic script call, the
    lanes are disjoint, and the chain walk only reads.)"""
    total = sum(len(_events(item)) for item in lanes)
    count = min(MAX_CHUNKS, total // CHUNK_EVENTS)
    if count <= 1:
        return [lanes]
    lanes = sorted(lanes, key=lambda item: _events(item)[0].partition)
    out: list[list[_T]] = [[]]
    size, share = 0, total / count
    for n, item in enumerate(lanes):
        out[-1].append(item)
        size += len(_events(item))
        partition = _events(item)[0].partition
        last_of_partition = n + 1 == len(lanes) or _events(lanes[n + 1])[0].partition != partition
        if last_of_partition and size >= share * len(out) and len(out) < count and n + 1 < len(lanes):
            out.append([])
    return out


def _events(item: tuple[object, ...]) -> list[Pending]:
    return cast(list[Pending], item[1])


async def let_send() -> None:
    """Let a chunk's commit task send its pipeline before planning goes on."""
    for _ in range(SEND_PASSES):
        await anyio.lowlevel.checkpoint()


PlanCareful = Callable[[dict[str, list[Pending]], dict[str, str], dict[int, list[LaneCommit]]], Awaitable[None]]
"""Read and plan lanes on the careful path into the given ``per_partition`` (the second
argument: the statuses that returned lanes from the previous pass)."""


class ChunkCommits(Generic[_P]):
    """A pass's chunk commits, run as tasks: the entries to recompute, and the first error
    (raised as it is once every chunk is done, not wrapped in an exception group, so that
    the read loop classifies it as it would a single commit's).

    ``commit`` commits planned lanes by partition (its second argument: the read-ahead to
    carry, or ``None``) and returns the entries to recompute; ``plan_careful`` reads and
    plans lanes on the careful path."""

    def __init__(self, commit: Callable[[dict[int, list[LaneCommit]], _P | None], Awaitable[list[Pending]]],
                 plan_careful: PlanCareful, stats: BatchStats) -> None:
        self._commit, self._plan_careful, self.stats = commit, plan_careful, stats
        self._retry: list[Pending] = []
        self._errors: list[Exception] = []

    async def run(self, per_partition: dict[int, list[LaneCommit]], prefetch: _P | None) -> None:
        """Commit planned lanes."""
        try:
            self._retry += await self._commit(per_partition, prefetch)
        except Exception as e:  # noqa: BLE001 - kept, and raised after the other chunks: see result()
            self._errors.append(e)

    async def careful(self, by_lane: dict[str, list[Pending]], sent_back: dict[str, str], prefetch: _P | None) -> None:
        """Read, plan and commit lanes on the careful path (``sent_back``: the statuses
        that returned lanes from the previous pass)."""
        per_partition: dict[int, list[LaneCommit]] = defaultdict(list)
        try:
            await self._plan_careful(by_lane, sent_back, per_partition)
        except Exception as e:  # noqa: BLE001 - kept, and raised after the other chunks: see result()
            self._errors.append(e)
            return
        await self.run(per_partition, prefetch)

    def failed(self, error: Exception) -> None:
        """Keep an error of the pass itself (planning), raised by :meth:`result`."""
        self._errors.append(error)

    def result(self) -> list[Pending]:
        """The entries to recompute; raises the first error kept."""
        if self._errors:
            raise self._errors[0]
        return self._retry
