"""Pushed updates: tail the signal streams of the lanes MCP clients watch, in Redis.

A notification comes from the lane's signal stream, never from the process that took the
write: every replica of the server tails the streams its own clients subscribed to, so a
write through any process (the app, the CLI, another replica, another MCP client)
reaches every subscribed client once a worker has committed its signal.

:class:`SignalWatch` keeps one cursor per watched lane (reference-counted: many clients
may watch one lane) and reads them with blocking XREADs, one read loop per group of lanes
(all lanes on one Redis; one group per partition on Redis Cluster, where the keys of one
XREAD must share a slot). A lane joins at the last entry of its stream, so everything
committed after the subscription is seen. When lanes join, the loop's blocking read is
cancelled (redis-py closes that connection) and re-issued with the new set.

Nothing read is trusted: each entry must be a signal of its lane
(:func:`~signals.streams.replay.decode_entry`, with the MAC when a signing key is set),
else it is skipped and logged (``mcp.entry_refused``). A lane whose key is not a stream
is parked (``mcp.lane_parked``) and probed again every :data:`PROBE_INTERVAL_S`, so one
bad key cannot stop the others' notifications. An unreachable Redis is retried with
backoff for as long as the server runs (``mcp.watch_retry``), and so is any other failed
read (a reply over the client's bound, a refusal by the ACL): the server keeps serving.

Several signals of a lane read together are one call of ``notify`` (the latest version):
a resource update is a level trigger, "read it again".
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup
from redis import exceptions as redis_exc

from signals.core.signing import Signer
from signals.errors import CorruptDataError, RedisUnavailableError, VerifyError, WmSignalsError
from signals.streams.backoff import full_jitter
from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_wrong_type
from signals.streams.replay import decode_entry, xrange_entries, xread_streams

__all__ = ("PROBE_INTERVAL_S", "SignalWatch", "TooManyLanesError")

log = structlog.get_logger(__name__)
#: How often a parked lane (its key not a stream) is probed again, in seconds.
PROBE_INTERVAL_S = 10.0

Notify = Callable[[str, int], Awaitable[None]]
"""Called with a lane and the latest version of the new signals read for it."""


class TooManyLanesError(Exception):
    """Raised by :meth:`SignalWatch.acquire` when the server already watches ``max_lanes`` lanes."""


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class _Group:
    """The lanes one read loop tails: cursor per lane, and lanes whose key is not a stream."""

    cursors: dict[str, str] = field(default_factory=dict)
    parked: set[str] = field(default_factory=set)
    wake: anyio.Event = field(default_factory=anyio.Event)
    reading: anyio.CancelScope | None = None
    probed_at: float = 0.0

    def changed(self) -> None:
        """Make the loop re-read its lanes: wake it, or cancel its blocking read."""
        self.wake.set()
        if self.reading is not None:
            self.reading.cancel()


class SignalWatch:
    """Tails the signal streams of watched lanes and calls ``notify`` for new signals.

    Args:
        redis: a redis.asyncio client (its socket timeout must be off: reads block).
        keys: the deployment's key layout.
        notify: called with ``(lane, version)`` for each lane with new signals.
        cluster: group lanes by partition (Redis Cluster).
        signer: when set, only entries with a valid MAC count.
        block_ms: how long one read blocks (under the client's socket timeout: redis-py's is 5 s).
        count: entries read per stream per read.
        max_lanes: lanes watched at most (:class:`TooManyLanesError` past it).
        probe_interval_s: how often a parked lane is probed again.
    """

    def __init__(self, redis: Client, keys: Keys, notify: Notify, *, cluster: bool = False,
                 signer: Signer | None = None, block_ms: int = 2000, count: int = 8,
                 max_lanes: int = 10_000, probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self.redis = redis
        self.keys = keys
        self.notify = notify
        self.cluster = cluster
        self.signer = signer
        self.block_ms = block_ms
        self.count = count
        self.max_lanes = max_lanes
        self.probe_interval_s = probe_interval_s
        self._refs: dict[str, int] = {}
        self._groups: dict[int, _Group] = {}
        self._joining: dict[str, anyio.Event] = {}
        self._tg: TaskGroup | None = None

    @property
    def lanes(self) -> int:
        """How many lanes are watched."""
        return len(self._refs)

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the read loops until cancelled (reports readiness at once)."""
        if self._tg is not None:
            raise RuntimeError("the signal watch is already running")
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:  # the read loops end with the task group: a new run starts from nothing
                self._tg = None
                self._groups.clear()
                self._refs.clear()

    async def acquire(self, lane: str) -> None:
        """Watch ``lane`` (one more reference): its signals after now reach ``notify``.

        Raises:
            TooManyLanesError: ``max_lanes`` lanes are watched already.
            RedisUnavailableError: another caller's first read of the lane, awaited here, failed.
            RuntimeError: :meth:`run` is not running.
        """
        if self._tg is None:
            raise RuntimeError("the signal watch is not running")
        if lane in self._refs:
            self._refs[lane] += 1
            joining = self._joining.get(lane)
            if joining is not None:  # its cursor is being read: watched once that is done
                await joining.wait()
                joined_group = self._group_of(lane)
                if lane not in joined_group.cursors and lane not in joined_group.parked:  # that read failed
                    self.release(lane)
                    raise RedisUnavailableError(f"watching {lane}: its signal stream could not be read")
            return
        if len(self._refs) >= self.max_lanes:
            raise TooManyLanesError(f"this server already watches {self.max_lanes} lanes")
        self._refs[lane] = 1
        self._joining[lane] = joined = anyio.Event()
        try:
            cursor = await self._last_id(lane)
        except BaseException:
            self.release(lane)
            raise
        finally:
            self._joining.pop(lane, None)
            joined.set()
        group_id = self.keys.partition(lane) if self.cluster else 0
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group()
            self._tg.start_soon(self._read_loop, group)
        if lane not in self._refs or lane in group.cursors or lane in group.parked:
            return  # released while its cursor was read, or joined again meanwhile
        if cursor is None:
            group.parked.add(lane)
        else:
            group.cursors[lane] = cursor
            group.changed()

    def release(self, lane: str) -> None:
        """Drop one reference to ``lane``; the last one stops watching it."""
        refs = self._refs.get(lane, 0) - 1
        if refs > 0:
            self._refs[lane] = refs
            return
        self._refs.pop(lane, None)
        group = self._group_of(lane)
        group.cursors.pop(lane, None)
        group.parked.discard(lane)

    def _group_of(self, lane: str) -> _Group:
        return self._groups.get(self.keys.partition(lane) if self.cluster else 0) or _Group()

    async def _last_id(self, lane: str, *, quiet: bool = False) -> str | None:
        """The id of the lane's last signal entry (``0-0``: none yet); ``None`` when its key
        is not a stream (the lane is parked: logged unless ``quiet``)."""
        try:
            entries = await xrange_entries(self.redis, self.keys.signals(lane), count=1, newest_first=True)
        except CorruptDataError as e:
            if not quiet:
                log.warning("mcp.lane_parked", lane=lane, error=str(e))
            return None
        return entries[0][0] if entries else "0-0"

    async def _read_loop(self, group: _Group) -> None:
        attempt = 0
        while True:
            if group.parked and time.monotonic() - group.probed_at >= self.probe_interval_s:
                await self._probe_parked(group)
            if not group.cursors:
                group.wake = anyio.Event()
                with anyio.move_on_after(self.probe_interval_s if group.parked else None):
                    await group.wake.wait()
                continue
            streams = {self.keys.signals(lane): cursor for lane, cursor in group.cursors.items()}
            lanes = {self.keys.signals(lane): lane for lane in group.cursors}
            group.wake = anyio.Event()
            reply: dict[str, list[Any]] | None = None
            with anyio.CancelScope() as scope:
                group.reading = scope
                try:
                    reply = await xread_streams(self.redis, streams, count=self.count, block=self.block_ms)
                    attempt = 0
                except redis_exc.ResponseError as e:
                    if is_wrong_type(e):
                        await self._park_bad(group)
                    else:  # refused (an ACL without XREAD on signal streams, say): said, and retried
                        attempt = await self._back_off(attempt, e, level="error")
                except (redis_exc.RedisError, WmSignalsError) as e:  # unreachable, or a reply over the bound
                    attempt = await self._back_off(attempt, e)
                finally:
                    group.reading = None
            if reply:
                await self._deliver(group, lanes, reply)

    @staticmethod
    async def _back_off(attempt: int, error: Exception, *, level: str = "warning") -> int:
        """Log a failed read and wait before the next (full jitter, up to 5 s); the next attempt's number."""
        delay = full_jitter(attempt, first_s=0.05, cap_s=5.0)
        getattr(log, level)("mcp.watch_retry", error=str(error)[:300], retry_in_s=round(delay, 3))
        await anyio.sleep(delay)
        return attempt + 1

    async def _park_bad(self, group: _Group) -> None:
        """Find the lanes whose key is not a stream (XREAD does not say which) and park them."""
        try:
            for lane in list(group.cursors):
                if await self._last_id(lane) is None:
                    group.cursors.pop(lane, None)
                    group.parked.add(lane)
        except (redis_exc.RedisError, WmSignalsError) as e:
            await self._back_off(0, e)

    async def _probe_parked(self, group: _Group) -> None:
        group.probed_at = time.monotonic()
        for lane in list(group.parked):
            try:
                cursor = await self._last_id(lane, quiet=True)
            except (redis_exc.RedisError, WmSignalsError) as e:
                log.warning("mcp.watch_retry", error=str(e)[:300], lane=lane)
                return
            if cursor is not None and lane in group.parked:
                group.parked.discard(lane)
                group.cursors[lane] = "0-0"  # the stream was made after the lane joined: all of it is new
                log.info("mcp.lane_unparked", lane=lane)

    async def _deliver(self, group: _Group, lanes: dict[str, str], reply: dict[str, list[Any]]) -> None:
        for key, entries in reply.items():
            lane = lanes.get(key)
            cursor = group.cursors.get(lane) if lane is not None else None
            if lane is None or cursor is None or not entries:
                continue  # released while the read was out
            latest = 0
            for entry in entries:
                if _stream_id(entry[0]) <= _stream_id(cursor):
                    continue  # seen before the lane joined again (entry ids come from Redis: ms-seq)
                try:
                    latest = max(latest, decode_entry(lane, entry, signer=self.signer).version)
                except VerifyError as e:
                    log.warning("mcp.entry_refused", lane=lane, entry_id=entry[0], problem=str(e))
            group.cursors[lane] = max(entries[-1][0], cursor, key=_stream_id)
            if latest:
                await self.notify(lane, latest)
