"""One commit script call does everything or nothing visible, whichever of its commands
(reads included) the worker's ACL refuses.

``commit.lua`` commits a call's partitions one after another, and their lanes one after
another, and Redis does not roll a script back: a command refused on a later lane failed
the call after earlier lanes' signals, trackings and acknowledgements were written. Reads
are run there too: retention's XRANGE and LRANGE after a snapshot is appended, the TYPE of
a snapshot list, adoption's XRANGE, a repair's TYPE, a document check's reads; a refused
HMGET or XREVRANGE of a lane was taken for a key of another type (and the lane repaired).

Each case takes one command the script runs away from one key kind in the worker's
generated ACL (``ACL SETUSER`` against a real redis-server, as an operator loading an old
ACL file would) and sends one call, as the worker plans it, over two partitions: a delta
lane alone in the first; in the second a delta lane whose document moved past the batch
(its check walks the write stream), a lane whose text is replaced whole (a snapshot:
retention runs), a thread lane (its check reads the owner record), a lane with a stray
signal after its tail (adoption reads it) and a lane under repair. The call must fail as a
whole with NOPERM naming the command and a key of that kind, and leave every key of the
namespace as it was (``DUMP``); with the ACL whole again the same call commits every lane.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from typing import Any

import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.core.lane import LaneDocument, LaneTracking
from signals.core.retention import Retention
from signals.streams.acl import SCRIPTS
from signals.streams.client import connect
from signals.streams.scripts import ServerScript, ensure_loaded
from signals.streams.store import WorkingMemoryStore
from tests.trust_boundary.narrowed_acl import KEYS, narrow, restore, state, url
from workers.engine.commit import BatchStats, LaneCommit
from workers.engine.commit_call import run_commits
from workers.engine.consumer import Consumer
from workers.engine.lane_state import Pending
from workers.engine.options import ConsumerOptions
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
COMMIT = SCRIPTS["commit"]
#: Every command commit.lua runs, on each key kind it runs it on (the keys it reads without
#: declaring them too).
CASES = [(kind, cmd) for kind, cmds in (*COMMIT.calls.items(), *COMMIT.reads.items()) for cmd in cmds]
#: The script's read-only commands: each runs in the cases' call (some only on a later lane).
READS = {"type", "hmget", "hget", "xrange", "xrevrange", "lrange"}
NOW = "2026-01-01T00:00:00Z"


def _named(partition: int, n: int) -> list[str]:
    """``n`` resource ids whose resource lanes are in ``partition``."""
    return [r for r in (f"user{i}" for i in range(200)) if KEYS.partition(f"r:{r}") == partition][:n]


def _thread(partition: int) -> str:
    return next(t for t in (f"thread{i}" for i in range(200)) if KEYS.partition(f"t:{t}") == partition)


FIRST, SECOND = 0, 1
[ALONE] = _named(FIRST, 1)
MOVED, REPLACED, STRAY, REPAIRED, OWNER = _named(SECOND, 5)
THREAD = _thread(SECOND)
#: The second partition's lanes in the order the call commits them: the first writes.
ORDER = [f"r:{MOVED}", f"r:{REPLACED}", f"t:{THREAD}", f"r:{STRAY}", f"r:{REPAIRED}"]


@pytest.fixture
async def admin(admin: Redis) -> Redis:
    """The conftest's admin, with the project's functions loaded (the calls here are made as the worker)."""
    await ensure_loaded(admin)
    return admin


def _doc(n: int) -> str:
    return "# Notes\n" + "".join(f"- fact {i}: long enough to make a delta worth sending\n" for i in range(8 + n))


async def _write_all(store: WorkingMemoryStore, n: int) -> None:
    for resource in (ALONE, MOVED, STRAY, REPAIRED):
        await store.replace(resource, _doc(n))
    await store.replace(REPLACED, _doc(n) if n == 0 else "- something else entirely")
    await store.replace(OWNER, _doc(n), thread_id=THREAD, scope="thread")


async def _read_all(consumer: Consumer) -> list[Any]:
    raw: list[Any] = []
    while batch := await consumer.read_batch():
        raw += batch
    return raw


async def _plan(consumer: Consumer, raw: list[Any]) -> list[tuple[int, list[LaneCommit]]]:
    """The lanes' commits exactly as the worker plans a batch (the steady state where the
    planner's cache allows it, else reading the lanes), in the order described above."""
    by_lane: dict[str, list[Pending]] = defaultdict(list)
    for stream, entry_id, fields in raw:
        partition = consumer._stream_partition[stream]
        event, prev, requeued = consumer._events.decode(fields, partition)
        by_lane[event.lane].append(Pending(partition, entry_id, event, prev, requeued))
    steady: list[tuple[str, list[Pending], LaneTracking, LaneDocument]] = []
    careful: dict[str, list[Pending]] = {}
    for lane, entries in by_lane.items():
        found = consumer._steady_state(lane, entries)
        if found is None:
            careful[lane] = entries
        else:
            steady.append((lane, entries, *found))
    per_partition: dict[int, list[LaneCommit]] = defaultdict(list)
    consumer._plan_steady_into(steady, NOW, per_partition, careful)
    await consumer._plan_careful(careful, BatchStats(), {}, NOW, per_partition)
    second = sorted(per_partition[SECOND], key=lambda c: ORDER.index(c.lane))
    assert [c.lane for c in per_partition[FIRST]] == [f"r:{ALONE}"] and [c.lane for c in second] == ORDER
    assert [bool(c.check) for c in second] == [True, True, True, True, False]
    assert [any(c.snapshots) for c in second] == [False, True, False, False, True]
    return [(FIRST, per_partition[FIRST]), (SECOND, second)]


async def _planned_call(server: RedisServer, admin: Redis) -> list[tuple[int, list[LaneCommit]]]:
    """Lanes committed once by a planner (the worker's consumer, unrestricted), written
    again, and planned again: the call of the cases."""
    store = WorkingMemoryStore(admin, keys=KEYS)
    consumer = Consumer(admin, KEYS, ConsumerOptions(batch=100, block_ms=1), "planner")
    await consumer.ensure_groups()
    await _write_all(store, 0)
    await consumer.process(await _read_all(consumer))
    await _write_all(store, 1)
    raw = await _read_all(consumer)
    await store.replace(MOVED, _doc(2))  # past the batch: the check walks back to it
    await admin.xadd(KEYS.signals(f"r:{STRAY}"), {"e": "a stray entry"})  # after the tail
    await admin.hdel(KEYS.track(f"r:{REPAIRED}"), "n")  # a partial tracking: the lane is repaired
    consumer._cache.forget(f"r:{REPAIRED}")
    return await _plan(consumer, raw)


async def _commit(server: RedisServer, order: list[tuple[int, list[LaneCommit]]]) -> list[Any]:
    worker = connect(url(server, "worker"))
    try:
        results, _ = await run_commits(worker, KEYS, ServerScript(worker, "commit"), order,
                                       retention=Retention(signals=2))
    finally:
        await worker.aclose()
    return results


def test_the_cases_cover_every_command_of_the_script() -> None:
    """Reads are among the cases, on every key kind the script touches."""
    assert {cmd for _, cmd in CASES} >= READS
    assert {kind for kind, _ in CASES} == {"writes", "trk", "sig", "snaps", "doc", "thread"}


async def test_the_call_commits_every_lane_and_runs_every_read(server: RedisServer, admin: Redis) -> None:
    """With the ACL whole the cases' call commits each lane (the stray one snapshotted past,
    as it must be) and runs each read command of the script (so each case refuses a command
    the call runs)."""
    order = await _planned_call(server, admin)
    await admin.config_resetstat()
    [first, second] = await _commit(server, order)
    assert [s[0] for s in first] == ["ok"]
    assert [s[0] for s in second] == ["ok", "ok", "ok", "resnap", "ok"], second
    stats: dict[str, Any] = await admin.info("commandstats")
    ran = {name.removeprefix("cmdstat_") for name, entry in stats.items() if entry.get("calls")}
    assert ran >= READS, sorted(ran)


@pytest.mark.parametrize(("kind", "command"), CASES)
async def test_a_call_refused_any_command_writes_nothing(server: RedisServer, admin: Redis, kind: str,
                                                         command: str) -> None:
    """The worker's ACL without one of the script's commands on one kind: the call fails as
    a whole naming the command and a key of that kind, and no key of the namespace changed;
    with the ACL whole again the same call commits."""
    order = await _planned_call(server, admin)
    await narrow(admin, "worker", kind, command)
    before = await state(admin)
    results = await _commit(server, order)
    assert await state(admin) == before, f"a call refused {command} on {kind} changed something"
    assert all(isinstance(r, redis_exc.ResponseError) for r in results), results
    error = str(results[0])
    assert f"run the {command} command on key" in error and "nothing was written" in error, error
    named = re.search(r"on key (\S+) ", error)
    assert named and fnmatch.fnmatchcase(named[1], KEYS.pattern(kind)), error
    await restore(admin, "worker")
    [first, second] = await _commit(server, order)
    assert [s[0] for s in (*first, *second)] == ["ok", "ok", "ok", "ok", "resnap", "ok"]
