"""The commit script's calls: a batch's lane commits (planned by :mod:`workers.engine.commit`)
sent as FCALL calls of ``commit.lua``'s function in one pipeline, and the per-lane statuses back.

What a call carries: the partitions' keys (the write stream, then each lane's tracking,
signal stream and snapshot list), a MessagePack plan of the lanes (fields by name) and the
lanes' signal texts as arguments of their own. What a status means, and what the script
checks before it writes, is the script's header (``signals/streams/lua/commit.lua``). Whole-
server errors propagate (see :func:`signals.streams.redis_errors.raise_whole_server`).
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from redis.asyncio.cluster import RedisCluster

from signals.core.retention import Retention
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import raise_whole_server
from signals.streams.scripts import missing
from workers.engine.commit import LaneCommit

__all__ = ("MERGE_EVENTS", "run_commits")

#: Partitions share one script call until it holds this many events: a light batch (a few
#: events over many partitions) pays the script's fixed cost once, and no call of a heavy
#: batch holds Redis much longer than one partition's did.
MERGE_EVENTS = 256


async def run_commits(
    redis: Client, keys: Keys, script: Any, order: list[tuple[int, list[LaneCommit]]], *,
    retention: Retention, read_ahead: tuple[str, list[str], int] | None = None,
) -> tuple[list[list[list[str]] | Exception], object]:
    """The commit script over the partitions of ``order`` in one pipeline, plus the
    read-ahead XREADGROUP (``(consumer, streams, count)``) when given. Returns each
    partition's per-lane statuses (or the error of the call that held it) and the
    read-ahead reply (or error). Signal streams are trimmed at snapshot boundaries under
    ``retention`` (:mod:`signals.core.retention`).

    On one server, partitions share a call up to :data:`MERGE_EVENTS` events (see
    :func:`_calls`); on a Redis Cluster each partition is a call of its own (a script's
    keys must share a slot). The lanes' signal texts follow the script's JSON argument as
    arguments of their own: escaped into it, they cost more to encode here and to decode
    in the script than anything else either does with them.

    The calls go as FCALL of the library's commit function (EVALSHA on Redis 6.2, see
    :mod:`signals.streams.scripts`). A call the server has no function for (the library
    was flushed, or Redis restarted without persistence; nothing ran) is made again once
    the worker has loaded the library."""
    plain = not isinstance(redis, RedisCluster)
    groups = _calls(order, merge=plain)
    calls = [_commit_call(keys, group, retention) for group in groups]
    async with redis.pipeline(transaction=False) as pipe:
        for script_keys, args in calls:
            await script.queue(pipe, script_keys, args)
        if read_ahead is not None:
            consumer, streams, count = read_ahead
            pipe.xreadgroup(GROUP, consumer, dict.fromkeys(streams, ">"), count=count)
        results = list(await pipe.execute(raise_on_error=False))
    ahead: object = results.pop() if read_ahead is not None else None
    absent = [n for n, result in enumerate(results) if missing(result)]
    if absent:
        await script.load()
        async with redis.pipeline(transaction=False) as pipe:
            for n in absent:
                script_keys, args = calls[n]
                await script.queue(pipe, script_keys, args)
            for n, result in zip(absent, await pipe.execute(raise_on_error=False), strict=True):
                results[n] = result
    raise_whole_server(results)
    out: list[list[list[str]] | Exception] = []
    for group, result in zip(groups, results, strict=True):
        if isinstance(result, Exception):
            out += [result] * len(group)
        else:
            out += cast(list[list[list[str]]], result)
    return out, ahead


def _calls(order: list[tuple[int, list[LaneCommit]]], *, merge: bool) -> list[list[tuple[int, list[LaneCommit]]]]:
    """The partitions of ``order`` grouped into script calls, in order."""
    if not merge:
        return [[item] for item in order]
    groups: list[list[tuple[int, list[LaneCommit]]]] = []
    size = 0
    for item in order:
        events = sum(len(c.acks) + len(c.signals) for c in item[1])
        if not groups or (size and size + events > MERGE_EVENTS):
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += events
    return groups


#: The commit script's plan argument is MessagePack (the script's ``cmsgpack``): the same
#: fields by name as JSON, decoded in the script in about two thirds of ``cjson``'s time
#: (measured: 2.4 against 3.6 us per lane); with ``cjson`` decoding is the largest single
#: step of a steady-state commit.
_plan_encoder = msgspec.msgpack.Encoder()


def _commit_call(keys: Keys, group: list[tuple[int, list[LaneCommit]]],
                 retention: Retention) -> tuple[list[str], list[str | int | bytes]]:
    """One commit script call over partitions: its keys and arguments (ARGV: group,
    retained signals, the partitions' plan in MessagePack, retained age in ms, then the
    texts)."""
    script_keys: list[str] = []
    partitions = []
    for partition, commits in group:
        script_keys.append(keys.writes(partition))
        for c in commits:
            script_keys += keys.worker_keys(c.lane)
        partitions.append({"lanes": [c.payload() for c in commits]})
    args: list[str | int | bytes] = [GROUP, retention.signals, _plan_encoder.encode(partitions), retention.age_ms]
    for _, commits in group:
        for c in commits:
            args += c.signals
    return script_keys, args
