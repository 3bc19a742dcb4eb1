"""What the overview page and the search read: the namespace report, the workers alive, the
lanes by recent activity, and which lanes and threads an id names.

The report is :func:`signals.streams.status.inspect` (bounded by ``scan`` lanes per
partition); heartbeats are read by key (GET and PTTL: the operator role's grants), for the
instances the consumer groups name; nothing here scans the keyspace.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

import msgspec
from redis import exceptions as redis_exc

from signals.core.wire import lane_owner_id, lane_scope, make_lane
from signals.errors import InvalidInputError
from signals.streams.client import Client
from signals.streams.keys import Keys, validate_id
from signals.streams.progress import lane_name_problem
from signals.streams.status import Report, inspect

__all__ = ("Found", "Overview", "Worker", "read_overview", "search")

#: Lane-set members read per partition for the lanes by recent activity.
RECENT_SCAN = 1_000
_INSTANCE_SUFFIX = re.compile(r"-\d+$")


@dataclass(frozen=True, slots=True)
class Worker:
    """A worker instance whose heartbeat is there (``host``, ``pid``, ``at`` as it wrote them)."""

    instance: str
    host: str
    pid: str
    at: str
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class RecentLane:
    """A lane and when its document was last written."""

    lane: str
    updated_at: str
    version: str


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview page's figures."""

    namespace: str
    report: Report
    workers: tuple[Worker, ...]
    recent: tuple[RecentLane, ...]
    recent_partial: bool


def _instances(report: Report) -> list[str]:
    """Heartbeat instances to look for: each consumer's name, the base it is numbered from
    (``<base>-<i>`` under a supervisor, ``<host>-<pid>`` alone) and this host's name."""
    names = {socket.gethostname()}
    for partition in report.partitions:
        for consumer in partition.consumers:
            names.add(consumer.name)
            base = consumer.name
            while _INSTANCE_SUFFIX.search(base):
                base = _INSTANCE_SUFFIX.sub("", base)
                names.add(base)
    return sorted(n for n in names if n and "{" not in n and "}" not in n)


def _text(value: object, limit: int = 80) -> str:
    return str(value)[:limit]


async def _workers(redis: Client, keys: Keys, instances: list[str]) -> list[Worker]:
    async with redis.pipeline(transaction=False) as pipe:
        for instance in instances:
            pipe.get(keys.heartbeat(instance))
            pipe.pttl(keys.heartbeat(instance))
        replies = await pipe.execute(raise_on_error=False)
    out = []
    for i, instance in enumerate(instances):
        value, ttl = replies[2 * i], replies[2 * i + 1]
        if not isinstance(value, str) or not isinstance(ttl, int) or ttl < 0:
            continue  # none, or not a worker's (a heartbeat always expires)
        try:
            body = msgspec.json.decode(value)
        except msgspec.DecodeError:
            continue
        if isinstance(body, dict):
            out.append(Worker(instance, _text(body.get("host", "")), _text(body.get("pid", "")),
                              _text(body.get("at", "")), ttl))
    return out


async def _recent(redis: Client, keys: Keys, top: int) -> tuple[list[RecentLane], bool]:
    """The ``top`` lanes whose documents were written last, among :data:`RECENT_SCAN` lanes per partition."""
    lanes: list[RecentLane] = []
    partial = False
    for partition in range(keys.partitions):
        try:
            cursor, found = await redis.sscan(keys.lanes(partition), 0, count=RECENT_SCAN)
        except redis_exc.ResponseError:  # not a set: inspect names it as the partition's problem
            continue
        partial = partial or cursor != 0
        names = [str(m) for m in found if lane_name_problem(keys, str(m), partition) is None][:RECENT_SCAN]
        async with redis.pipeline(transaction=False) as pipe:
            for lane in names:
                pipe.hmget(keys.doc(lane), "updatedAt", "version")
            replies = await pipe.execute(raise_on_error=False)
        for lane, reply in zip(names, replies, strict=True):
            if isinstance(reply, list) and isinstance(reply[0], str):
                lanes.append(RecentLane(lane, _text(reply[0], 40), _text(reply[1], 20)))
        lanes = sorted(lanes, key=lambda x: x.updated_at, reverse=True)[:top]
    return lanes, partial


async def read_overview(redis: Client, keys: Keys, *, top: int = 20, scan: int = 2_000) -> Overview:
    """The namespace report, the live workers and the most recently written lanes."""
    report = await inspect(redis, keys, top=top, scan=scan)
    workers = await _workers(redis, keys, _instances(report))
    recent, partial = await _recent(redis, keys, top)
    return Overview(keys.namespace, report, tuple(workers), tuple(recent), partial)


@dataclass(frozen=True, slots=True)
class Found:
    """What an id names: ``kind`` is ``lane`` or ``thread``; ``detail`` says what is there."""

    kind: str
    target: str
    detail: str


async def search(redis: Client, keys: Keys, query: str) -> list[Found]:
    """The lanes and the thread an id names: ``r:<id>``, ``t:<id>``, and the thread's delivery log.

    Raises:
        InvalidInputError: ``query`` is not an id (empty, too long, control characters, braces).
    """
    query = query.strip()
    if lane_scope(query) is not None:
        query = lane_owner_id(query)
    ident = validate_id(query, "resource or thread id")
    resource, thread = make_lane("resource", ident), make_lane("thread", ident)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(keys.doc(resource), "version")
        pipe.xlen(keys.signals(resource))
        pipe.hget(keys.doc(thread), "version")
        pipe.xlen(keys.signals(thread))
        pipe.hget(keys.thread(ident), "resource")
        pipe.xlen(keys.deliveries(ident))
        replies = await pipe.execute(raise_on_error=False)
    if any(isinstance(r, redis_exc.ResponseError) and "NOPERM" in str(r) for r in replies):
        raise InvalidInputError("the UI's Redis user may not read these keys: run it as the operator role")
    r_version, r_signals, t_version, t_signals, owner, deliveries = (
        r if not isinstance(r, Exception) else None for r in replies)
    out = []
    for lane, version, signals in ((resource, r_version, r_signals), (thread, t_version, t_signals)):
        if version is not None or signals:
            out.append(Found("lane", lane, f"document version {_text(version, 20) if version else '-'}, "
                                           f"{signals or 0} signals retained"))
    if owner is not None or deliveries:
        owned = f"owned by resource {_text(owner)}" if isinstance(owner, str) else "no thread record"
        out.append(Found("thread", ident, f"{owned}, {deliveries or 0} delivery records"))
    return out
