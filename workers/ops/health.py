"""Liveness, readiness and the heartbeat of worker processes.

What it does: a :class:`Board` is shared memory with one slot per worker process (one
for a plain worker, N under ``--processes N``): the monitor task of each process
(:class:`Monitor`, beside the worker's maintenance) writes into its slot, once every
``health_interval_s``, the progress time of its read loops, the outcome of its readiness
check and its metrics vector (:mod:`workers.engine.counters`). The HTTP endpoint
(:mod:`workers.ops.server`) only reads the board, never Redis, so a scrape or a probe
never waits on Redis or on the event loop.

Liveness (``/livez``): every process's read loops made progress (a read returned, timed
out, or a reconnect back-off step ended) within ``max(liveness_s, 3 x block_ms)``,
default 30 s. A loop iterates at least every ``block_ms`` while idle, once a batch
while busy, every <= 2 s while Redis is away (so a Redis outage is not a liveness
failure: restarting the worker would not help, readiness says it). The bound leaves
room for a slow batch (a large backlog recomputed under contention) and for pauses;
a worker stuck longer than that (a hung connection, a wedged event loop: then the
monitor stops writing its slot too) is dead.

Readiness (``/readyz``): the last check of every process, at most
``3 x health_interval_s + 5 s`` old (:func:`ready_max_age`), found Redis answering as a
master with memory below ``maxmemory`` (a read-only replica, or a server out of memory,
answers the checks' reads, but refuses every commit), the
consumer group on every partition's write stream and the worker's Lua scripts in the script cache (a check
that finds them missing, after a Redis restart or ``SCRIPT FLUSH``, loads them).

Heartbeat (``worker --check``): the monitor sets ``<namespace>:{hb}:<instance>``
(:meth:`signals.streams.keys.Keys.heartbeat`; the instance is ``consumer_name`` when
set, else the host name, so a probe in the same container finds it) with a TTL of
``heartbeat_ttl_s`` (default 10 s), each tick while every process of the board is live
and ready (so a probe passes only once every process of ``--processes N`` runs).
A stopped worker deletes it; a dead or stuck one lets it expire. :func:`check_heartbeat`
reads it.

What it does not do: it decides nothing about the worker's reading; it never stops a
worker except when the supervising parent of a child process has gone (orphans stop).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from ctypes import c_double
from multiprocessing.sharedctypes import RawArray
from typing import Any, ClassVar

import anyio
import msgspec
import structlog
from redis import exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster

from signals.core._time import now_iso
from signals.core.codec import encode_json
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import is_whole_server, is_wrong_type
from signals.streams.scripts import ScriptsNotLoadedError, ensure_loaded, library_name
from workers.engine.counters import METRICS, Layout, WorkerMetrics

__all__ = ("READY_TEXT", "Board", "Monitor", "check_heartbeat", "heartbeat_instance",
           "liveness_bound", "ready_max_age")

log = structlog.get_logger(__name__)


#: Readiness codes (stored as floats in the board) and the text ``/readyz`` answers.
READY_TEXT = {
    0: "ready",
    1: "starting: no readiness check has run yet",
    2: "Redis does not answer",
    3: "Redis refuses work for now (out of memory, loading or read-only)",
    4: "the consumer group is missing on a partition's write stream",
    5: "a partition's write stream holds another type of value",
    6: "the worker's scripts are not loaded and could not be loaded",
    7: "stopping",
}
_HEADER = 4  # seq (odd while being written), progress (monotonic s), readiness code, checked at (monotonic s)


def liveness_bound(liveness_s: float, block_ms: int) -> float:
    """Seconds a read loop may go without progress before the worker counts as dead."""
    return max(liveness_s, 3 * block_ms / 1000)


def ready_max_age(interval_s: float) -> float:
    """How old a readiness check may be and still count (a few missed ticks)."""
    return 3 * interval_s + 5.0


def heartbeat_instance(consumer_name: str | None) -> str:
    """The heartbeat's instance: the configured consumer name, else the host's name."""
    return consumer_name or socket.gethostname()


class Board:
    """Shared slots (one per worker process) of progress, readiness and metrics.

    A slot has one writer (its process's monitor); readers copy it with a sequence
    check (odd while written, retried when it changed), so a scrape never sees a slot
    half-written. Plain ``RawArray`` doubles: no lock, works in one process or between
    a parent and its spawned children.
    """

    def __init__(self, slots: int, layout: Layout, ctx: Any = None) -> None:
        self.slots = slots
        self.layout = layout
        self.width = _HEADER + layout.size
        make = ctx.RawArray if ctx is not None else RawArray
        self.data = make(c_double, slots * self.width)
        now = time.monotonic()
        for slot in range(slots):
            self.data[slot * self.width + 1] = now  # start-up gets one liveness bound
            self.data[slot * self.width + 2] = 1.0  # starting

    def write(self, slot: int, progress: float, ready: int, checked_at: float, vector: list[float]) -> None:
        """Publish one process's state into its slot."""
        base = slot * self.width
        d = self.data
        d[base] += 1  # odd: being written
        d[base + 1] = progress
        d[base + 2] = float(ready)
        d[base + 3] = checked_at
        d[base + _HEADER:base + self.width] = vector
        d[base] += 1

    def read(self, slot: int) -> list[float]:
        """A consistent copy of a slot: ``[seq, progress, ready, checked_at, *vector]``."""
        base = slot * self.width
        d = self.data
        for _ in range(1000):
            seq = d[base]
            copy = list(d[base:base + self.width])
            if seq == d[base] and int(seq) % 2 == 0:
                return copy
            time.sleep(0)  # the writer is mid-write: let it finish
        return copy  # a writer that died mid-write: its last values, good enough to judge it

    def vectors(self, stale_s: float | None = None) -> list[list[float]]:
        """Every slot's metrics vector; with ``stale_s``, a slot not published for longer
        (its process stopped: SIGSTOP, a hang) reads ``up`` 0: its last vector says 1, and
        ``wm_signals_up`` would stay 1 while ``/livez`` and ``/readyz`` say the worker is stuck."""
        now = time.monotonic()
        out = []
        for slot in range(self.slots):
            copy = self.read(slot)
            vector = copy[_HEADER:]
            if stale_s is not None and now - copy[3] > stale_s:
                vector[self.layout.gauges] = 0.0  # the up gauge (see WorkerMetrics.vector)
            out.append(vector)
        return out

    def liveness(self, bound: float, alive: Callable[[int], bool] | None = None) -> str | None:
        """Why the worker is not live, or ``None`` when every slot progressed within ``bound``."""
        now = time.monotonic()
        for slot in range(self.slots):
            if alive is not None and not alive(slot):
                return f"worker process {slot} is not running"
            idle = now - self.read(slot)[1]
            if idle > bound:
                return f"worker process {slot}: no read loop progress for {idle:.0f}s (bound {bound:.0f}s)"
        return None

    def readiness(self, max_age: float, alive: Callable[[int], bool] | None = None) -> str | None:
        """Why the worker is not ready, or ``None`` when every slot's last check is fresh and passed."""
        now = time.monotonic()
        for slot in range(self.slots):
            if alive is not None and not alive(slot):
                return f"worker process {slot} is not running"
            _, _, code, checked = self.read(slot)[:_HEADER]
            if int(code) != 0:
                return f"worker process {slot}: {READY_TEXT.get(int(code), 'unknown state')}"
            if now - checked > max_age:
                return f"worker process {slot}: readiness check is {now - checked:.0f}s old"
        return None


class Monitor:
    """A worker process's periodic health task: readiness, gauges, heartbeat, its board slot.

    One round trip per tick for the checks and gauges (a pipeline of ``XINFO GROUPS``
    and ``XLEN`` per partition, read-only), one ``SCRIPT EXISTS``, one ``SET ... PX``.
    """

    TICK_TIMEOUT_S: ClassVar[float] = 5.0

    def __init__(self, redis: Client, keys: Keys, *, board: Board, slot: int, interval_s: float,
                 heartbeat_ttl_s: float, bound_s: float, instance: str, metrics: WorkerMetrics = METRICS,
                 parent: int | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.board = board
        self.slot = slot
        self.interval_s = interval_s
        self.ttl_ms = max(int(heartbeat_ttl_s * 1000), 1)
        self.bound_s = bound_s
        self.instance = instance
        self.metrics = metrics
        self.parent = parent
        self.ready = 1
        self.checked_at = 0.0
        self.stopping = False
        metrics.resize(keys.partitions)

    async def run(self, stop: anyio.Event) -> None:
        """Tick until cancelled; sets ``stop`` when the supervising parent process has gone."""
        while True:
            if self.parent is not None and os.getppid() != self.parent:
                log.warning("worker.orphaned", parent=self.parent, note="the supervisor is gone: stopping")
                stop.set()
            await self.tick()
            await anyio.sleep(self.interval_s)

    async def tick(self) -> None:
        """Check readiness, refresh the gauges, write the heartbeat, publish the slot."""
        code = 2  # a check that does not finish in time: Redis does not answer
        with anyio.move_on_after(self.TICK_TIMEOUT_S):
            code = await self._check()
        self.ready = code
        self.checked_at = time.monotonic()
        self.publish()
        board = self.board
        if (not self.stopping and board.readiness(ready_max_age(self.interval_s)) is None
                and board.liveness(self.bound_s) is None):
            with anyio.move_on_after(self.TICK_TIMEOUT_S):
                try:
                    await self.redis.set(self.keys.heartbeat(self.instance), self._heartbeat(), px=self.ttl_ms)
                except redis_exc.RedisError as e:
                    log.warning("worker.heartbeat_failed", error=repr(e))

    def publish(self) -> None:
        """Write this process's progress, readiness and metrics into its board slot."""
        ready = 7 if self.stopping else self.ready
        self.board.write(self.slot, self.metrics.progress(), ready, self.checked_at,
                         self.metrics.vector(self.board.layout))

    async def clear(self) -> None:
        """At a graceful stop: mark the slot stopping and delete the heartbeat (bounded, shielded)."""
        self.stopping = True
        self.publish()
        with anyio.move_on_after(2.0, shield=True):
            try:
                await self.redis.delete(self.keys.heartbeat(self.instance))
            except redis_exc.RedisError as e:
                log.warning("worker.heartbeat_failed", error=repr(e))

    def _heartbeat(self) -> str:
        return encode_json({"host": socket.gethostname(), "pid": os.getpid(), "at": now_iso(),
                            "ttl_ms": self.ttl_ms})

    async def _check(self) -> int:
        """One readiness check (a code of :data:`READY_TEXT`); refreshes the Redis-read gauges."""
        try:
            return await self._probe()
        except ScriptsNotLoadedError:  # this worker's ACL may not load them: nothing it commits would run
            return 3
        except redis_exc.RedisError as e:
            if isinstance(e, (redis_exc.ConnectionError, redis_exc.TimeoutError)):
                return 2
            if is_whole_server(e):
                return 3
            log.warning("worker.readiness_check_failed", error=repr(e))
            return 6

    async def _probe(self) -> int:
        keys = self.keys
        single = not isinstance(self.redis, RedisCluster)  # a cluster client talks to primaries
        async with self.redis.pipeline(transaction=False) as pipe:
            for stream in keys.all_writes():
                pipe.xinfo_groups(stream)
            for p in range(keys.partitions):
                pipe.xlen(keys.dead_letters(p))
            if single:
                pipe.info("replication")
                pipe.info("memory")
            replies = await pipe.execute(raise_on_error=False)
        code = self._gauges(replies[:2 * keys.partitions])
        if single and (_is_replica(replies[-2]) or _out_of_memory(replies[-1])):
            # every commit would be refused (READONLY, OOM), though the reads above pass there; first,
            # as the cause: a worker started on a replica never made its groups there either
            return 3
        if code:
            return code
        if await ensure_loaded(self.redis):  # flushed, or a restart without persistence
            log.warning("worker.functions_loaded", library=library_name(),
                        note="the wm-signals functions were missing on the server: loaded again")
        return 0

    def _gauges(self, replies: list[Any]) -> int:
        n = self.keys.partitions
        for reply in replies:
            if isinstance(reply, (redis_exc.ConnectionError, redis_exc.TimeoutError)):
                raise reply
            if isinstance(reply, redis_exc.RedisError) and is_whole_server(reply):
                raise reply
        code = 0
        m = self.metrics
        for p, reply in enumerate(replies[:n]):
            group = _group(reply)
            if group is None:
                code = code or (5 if is_wrong_type(reply) else 4)
                continue
            lag, pending = group.get("lag"), group.get("pending")
            if isinstance(lag, int):  # None when Redis cannot tell (entries deleted mid-stream): kept
                m.lag[p] = float(lag)
            elif "lag" not in group:  # Redis before 7.0 does not count it: unknown, not 0
                m.lag[p] = math.nan
            if isinstance(pending, int):
                m.pending[p] = float(pending)
        m.dead_letter_length = float(sum(r for r in replies[n:] if isinstance(r, int)))
        m.gauges_at = time.monotonic()
        return code


def _is_replica(info: object) -> bool:
    """Whether an ``INFO replication`` reply is a replica's (which refuses the worker's writes)."""
    return isinstance(info, dict) and info.get("role") in ("slave", "replica")


def _out_of_memory(info: object) -> bool:
    """Whether an ``INFO memory`` reply shows Redis past ``maxmemory`` (as Redis counts it, leaving
    out replication and AOF buffers): it then refuses every write (OOM), the commits included,
    while it still answers reads. Under an evicting policy Redis evicts before each command, so
    memory still past the limit means it could not."""
    if not isinstance(info, dict):
        return False
    limit, used, uncounted = (info.get(k) for k in ("maxmemory", "used_memory", "mem_not_counted_for_evict"))
    if not isinstance(limit, int) or not isinstance(used, int) or limit <= 0:
        return False
    return used - (uncounted if isinstance(uncounted, int) else 0) > limit


def _group(reply: object) -> dict[str, Any] | None:
    """The worker group's entry of an ``XINFO GROUPS`` reply (nothing from Redis is trusted)."""
    if not isinstance(reply, list):
        return None
    for group in reply:
        if isinstance(group, dict) and group.get("name") == GROUP:
            return group
    return None


async def check_heartbeat(redis: Client, keys: Keys, instance: str) -> str | None:
    """Why no live worker ``instance`` is known in the namespace, or ``None`` when its
    heartbeat is there and expiring (a key without a TTL was not written by a worker)."""
    key = keys.heartbeat(instance)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(key)
        pipe.pttl(key)
        value, ttl = await pipe.execute(raise_on_error=False)
    for reply in (value, ttl):
        if isinstance(reply, Exception):
            raise reply
    if value is None:
        return (f"no fresh heartbeat {key}: no live worker {instance!r} in namespace {keys.namespace!r} "
                "(stopped, stuck or never started)")
    if not isinstance(ttl, int) or ttl < 0:
        return f"{key} has no expiry: not a worker's heartbeat"
    try:
        body = msgspec.json.decode(value)
    except msgspec.DecodeError:
        body = None
    if not isinstance(body, dict):
        return f"{key} holds {str(value)[:40]!r}, not a worker's heartbeat"
    return None
