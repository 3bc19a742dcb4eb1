"""A read-only health report of a namespace: partitions, consumers, pending, lag, dead letters.

Lane names and versions are tenants' data (a writer adds its lanes to its partition's lane
set and sets its documents' fields): a lane set member that is not a lane of its partition,
and a lane whose versions do not read, is reported as a bad lane (named, with the reason,
counted per partition) and the report goes on with the other lanes; it is left out of the
lag and the busiest lanes. One tenant's junk must not hide the namespace from its operator.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field

from redis import exceptions as redis_exc

from signals.errors import CorruptDataError
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.orphans import orphaned_lanes
from signals.streams.progress import lane_name_problem, lane_progress
from signals.streams.redis_errors import is_wrong_type

__all__ = ("BAD_LANES_LISTED", "SCAN_LANES", "BadLane", "ConsumerInfo", "PartitionInfo", "Report", "inspect",
           "shown_name")

#: How many bad lanes a report names (all of them are counted).
BAD_LANES_LISTED = 100
#: How many members of a partition's lane set a report reads by default (about: SSCAN pages
#: of 1,000) for the lag, bad and busiest lanes.
SCAN_LANES = 10_000
#: How many characters of a lane name a report shows.
_SHOWN_CHARS = 80


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One consumer of a partition's group."""

    name: str
    pending: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition (``bad``: members of its lane set that are bad lanes; ``scanned``: how
    many members were read for ``lag``, ``bad`` and the busiest lanes when the scan stopped
    at the report's limit before the end of the set, whose figures are then partial;
    ``None``: every member was read)."""

    partition: int
    stream_length: int
    pending: int
    lag: int
    lanes: int
    dead_letters: int
    consumers: tuple[ConsumerInfo, ...]
    bad: int = 0
    scanned: int | None = None
    problems: tuple[str, ...] = ()
    """Keys of the partition the report could not read (another type): their figures read 0."""


@dataclass(frozen=True, slots=True)
class BadLane:
    """A member of a partition's lane set the report could not take as a lane: ``lane`` is
    its name as shown (:func:`shown_name`), ``reason`` what is wrong with it."""

    partition: int
    lane: str
    reason: str


@dataclass(frozen=True, slots=True)
class Report:
    """The whole namespace; ``bad_lanes`` names the first :data:`BAD_LANES_LISTED` bad lanes
    (``totals["bad"]`` counts them all)."""

    partitions: tuple[PartitionInfo, ...]
    busiest: tuple[tuple[str, int], ...] = field(default=())
    bad_lanes: tuple[BadLane, ...] = field(default=())

    @property
    def totals(self) -> dict[str, int]:
        """Sums over partitions."""
        return {name: sum(getattr(p, name) for p in self.partitions)
                for name in ("stream_length", "pending", "lag", "lanes", "dead_letters", "bad")}


def shown_name(lane: str) -> str:
    """A lane name as a report shows it: printable (a control character or a byte that is
    not UTF-8 is escaped: ``\\x1b``, ``\\xff``) and at most 80 characters of it, followed by
    its length when it is longer."""
    def char(c: str) -> str:
        if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that is not UTF-8 (read with surrogateescape)
            return f"\\x{ord(c) - 0xDC00:02x}"
        return c if c.isprintable() else repr(c)[1:-1]  # \x1b, \u202e
    text = "".join(char(c) for c in lane[:_SHOWN_CHARS])
    return text if len(lane) <= _SHOWN_CHARS else f"{text}… ({len(lane):,} characters)"


async def inspect(redis: Client, keys: Keys, *, top: int = 10, scan: int = SCAN_LANES) -> Report:
    """Build the report. ``lag`` counts lanes whose worker is behind their document;
    ``busiest`` ranks the lanes by document version (writes); a bad lane (see the module) is
    counted in ``bad`` and named in ``bad_lanes`` instead. The lane figures read about
    ``scan`` members of each partition's lane set (SSCAN pages of 1,000, so the reading of
    a huge namespace stays bounded): a partition read in part says so
    (:attr:`PartitionInfo.scanned`)."""
    parts = []
    lanes = _Lanes(top)
    for p in range(keys.partitions):
        stream, lane_set, dead = keys.writes(p), keys.lanes(p), keys.dead_letters(p)
        problems: list[str] = []
        length = await _count(problems, stream, "stream", redis.xlen(stream))
        consumers: list[ConsumerInfo] = []
        pending = 0
        try:
            pending = int((await redis.xpending(stream, GROUP))["pending"])
            consumers = [ConsumerInfo(c["name"], int(c["pending"]), int(c["idle"]))
                         for c in await redis.xinfo_consumers(stream, GROUP)]
        except redis_exc.ResponseError:  # no group yet (no worker ever started), or not a stream (above)
            pass
        known = len(problems)
        lane_count = await _count(problems, lane_set, "set", redis.scard(lane_set))
        lag = bad = 0
        scanned: int | None = None
        if len(problems) == known:  # a lane set to scan
            lag, bad, scanned = await lanes.scan(redis, keys, p, scan)
        dead_letters = await _count(problems, dead, "stream", redis.xlen(dead))
        parts.append(PartitionInfo(p, length, pending, lag, lane_count, dead_letters, tuple(consumers), bad, scanned,
                                   tuple(problems)))
    return Report(tuple(parts), tuple(lanes.busiest), tuple(lanes.bad))


async def _count(problems: list[str], key: str, kind: str, read: Awaitable[int]) -> int:
    """A count of ``key`` (``read``, awaited here), or 0 with a problem noted when the key has another
    type: one partition's junk key must not cost the operator the whole report."""
    try:
        return int(await read)
    except redis_exc.ResponseError as e:
        if not is_wrong_type(e):
            raise
        problems.append(f"{key} is not a {kind}: its figures read 0 (an operator must delete or repair it)")
        return 0


class _Lanes:
    """The lanes part of a report, partition by partition: the busiest lanes and the bad ones."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.busiest: list[tuple[str, int]] = []
        self.bad: list[BadLane] = []

    def _bad(self, partition: int, lane: str, reason: str) -> None:
        if len(self.bad) < BAD_LANES_LISTED:
            self.bad.append(BadLane(partition, shown_name(lane), reason))

    async def scan(self, redis: Client, keys: Keys, partition: int, limit: int) -> tuple[int, int, int | None]:
        """Read up to about ``limit`` lanes of a partition; its lagging and bad lane counts,
        and how many members were read when the scan stopped before the end (else ``None``)."""
        lag = bad = 0
        cursor, seen = 0, 0
        while True:
            cursor, found = await redis.sscan(keys.lanes(partition), cursor, count=1000)
            lanes = []
            for lane in (str(member) for member in found):
                problem = lane_name_problem(keys, lane, partition)
                if problem is None:
                    lanes.append(lane)
                else:
                    bad += 1
                    self._bad(partition, lane, problem)
            behind = []
            for lane, read in zip(lanes, await lane_progress(redis, keys, lanes), strict=True):
                if isinstance(read, CorruptDataError):
                    bad += 1
                    self._bad(partition, lane, str(read))
                    continue
                lag += read[1] < read[0]
                if read[1] < read[0]:
                    behind.append(lane)
                self.busiest.append((lane, read[0]))
            for orphan in await orphaned_lanes(redis, keys, partition, behind):
                bad += 1
                self._bad(partition, orphan.lane, f"document at version {orphan.version}, signalled up to "
                          f"{orphan.processed}, and its write event {orphan.eid} is gone from the write stream "
                          "(trimmed): a worker's reconciliation signals it at its next maintenance pass")
            self.busiest = sorted(self.busiest, key=lambda x: -x[1])[:self.top]
            seen += len(found)
            if cursor == 0:
                return lag, bad, None
            if seen >= limit:
                return lag, bad, seen
