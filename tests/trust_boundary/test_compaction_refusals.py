"""Compaction does everything or nothing visible, whichever of its commands is refused.

``compact.lua`` rewrites a lane in several commands (DEL, XADD, DUMP and RESTORE of the
signal stream, DEL of the snapshot list, HSET of the tracking), lane after lane, and
Redis does not roll a script back: a command refused after the first write left the lane
with its stream made again but its tracking not, or a later lane's read refused after an
earlier lane was rewritten. Each case here takes one command that the script runs away
from one key kind in the worker's generated ACL (``ACL SETUSER`` against a real
redis-server, as an operator loading an old ACL file would), runs compaction over idle
lanes (ending at a delta and at a snapshot in turn, in one script call), and checks that
nothing in the namespace changed (byte for byte: ``DUMP``) and that the worker side did
not raise; then, with the ACL whole again, that compaction succeeds and every lane
verifies against its document.
"""

from __future__ import annotations

import time

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.streams.acl import SCRIPTS
from signals.streams.client import connect
from signals.streams.store import WorkingMemoryStore
from signals.streams.verify import verify_lane
from tests.integration.helpers import check_lane, wait_caught_up
from tests.trust_boundary.narrowed_acl import KEYS, narrow, restore, state, url
from tests.trust_boundary.support import worker_in_process
from workers.engine.compaction import Compactor
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(12)]
#: Lanes of partition 0 (one script call holds them all).
RESOURCES = [r for r in (f"user{i}" for i in range(100)) if KEYS.partition(f"r:{r}") == 0][:8]
#: Every command compact.lua runs, on each key kind it runs it on.
CASES = [(kind, cmd) for kind, cmds in SCRIPTS["compact"].calls.items() for cmd in cmds]


def _doc(n: int) -> str:
    lines = list(LINES)
    lines[n % len(lines)] = f"- fact {n % len(lines)} changed at write {n}"
    return "# Notes\n" + "\n".join(lines)


async def _idle_lanes(server: RedisServer, admin: Redis) -> None:
    """Lanes of partition 0 with more than one snapshot's worth of history each, in the order
    compaction takes them (the lane registry's SSCAN order, which the server's hash seed
    sets): the first, third... end at a delta, the others at a second snapshot (a text
    replaced whole: a delta would not be smaller), whose rewrite reads its last entry
    (XRANGE); so one lane is rewritten before the next one's commands run."""
    writer = connect(url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    try:
        async with worker_in_process(url(server, "worker"), KEYS):
            for resource in RESOURCES:
                await store.replace(resource, _doc(0))
            cursor, members = await admin.sscan(KEYS.lanes(0), 0, count=500)
            assert cursor == 0 and len(members) == len(RESOURCES)
            order = [str(m).removeprefix("r:") for m in members]
            for n in range(1, 3):
                for resource in order[0::2]:
                    await store.replace(resource, _doc(n))
            for resource in order[1::2]:
                await store.replace(resource, "- something else entirely")
            await wait_caught_up(admin, KEYS)
    finally:
        await writer.aclose()
    for i, resource in enumerate(order):
        mode = await admin.hget(KEYS.track(f"r:{resource}"), "mode")
        assert mode == ("snapshot" if i % 2 else "delta"), (resource, mode)


async def _sweep(compactor: Compactor) -> None:
    """Passes until every partition was swept once (now + 1 s: every lane is idle)."""
    for _ in range(2 * len(compactor.partitions) + 1):
        await compactor.run_pass(round(time.time() * 1000) + 1000)


async def _lanes_compacted_and_verified(admin: Redis) -> None:
    for resource in RESOURCES:
        lane = f"r:{resource}"
        signals = await check_lane(admin, KEYS, lane)
        assert [s.mode for s in signals] == ["snapshot"], (lane, "not compacted")
        report = await verify_lane(admin, KEYS, lane)
        assert report.signals == 1


def test_the_cases_cover_every_command_of_the_script() -> None:
    """The commands the write path of compact.lua runs are all among the cases."""
    assert {"del", "xadd", "dump", "restore", "hset", "xrange", "xlen"} <= {cmd for _, cmd in CASES}
    assert {kind for kind, _ in CASES} == {"trk", "sig", "snaps"}


@pytest.mark.parametrize(("kind", "command"), CASES)
async def test_a_compaction_refused_changes_nothing(server: RedisServer, admin: Redis, kind: str,
                                                   command: str) -> None:
    """The worker's ACL without one of compaction's commands on one kind: a sweep changes
    no key of the namespace, does not raise and logs the refusal naming the command; with
    the ACL whole again the lanes are compacted to one snapshot each and verify against
    their documents."""
    await _idle_lanes(server, admin)
    worker = connect(url(server, "worker"))
    compactor = Compactor(worker, KEYS, idle_ms=0, batch=10_000, partitions=[0])
    try:
        await narrow(admin, "worker", kind, command)
        before = await state(admin)
        with capture_logs() as logs:
            await _sweep(compactor)
        assert await state(admin) == before, f"compaction refused {command} on {kind} and changed something"
        assert compactor.stats.compacted == 0
        refused = [str(e["error"]).lower() for e in logs if e["event"] == "worker.compaction_refused"]
        assert refused and all(command in error for error in refused), [e["event"] for e in logs]
        await restore(admin, "worker")
        await _sweep(compactor)
        assert compactor.stats.compacted == len(RESOURCES)
        await _lanes_compacted_and_verified(admin)
    finally:
        await worker.aclose()


async def test_a_refused_script_call_is_logged_naming_the_command(server: RedisServer, admin: Redis) -> None:
    """The script's refusal reaches the worker as one error naming the command and the key,
    saying nothing was written; the lanes it held are counted as skipped."""
    await _idle_lanes(server, admin)
    worker = connect(url(server, "worker"))
    compactor = Compactor(worker, KEYS, idle_ms=0, batch=10_000, partitions=[0])
    try:
        await narrow(admin, "worker", "sig", "restore")
        with capture_logs() as logs:
            await _sweep(compactor)
        refused = [e for e in logs if e["event"] == "worker.compaction_refused"]
        assert refused, [e["event"] for e in logs]
        error = refused[0]["error"]
        assert "restore command" in error and any(KEYS.signals(f"r:{r}") in error for r in RESOURCES), error
        assert "nothing was written" in error
        assert not [e for e in logs if e["event"] == "worker.compaction_failed"]
        assert compactor.stats.skipped >= len(RESOURCES)
    finally:
        await worker.aclose()


async def test_a_worker_whose_compaction_is_refused_keeps_running(server: RedisServer, admin: Redis) -> None:
    """The worker's own maintenance compacting with DUMP refused on signal streams: the
    worker keeps running and committing (a write goes through meanwhile), the idle lanes
    keep every key as it was; once the ACL is whole again its maintenance compacts them."""
    await _idle_lanes(server, admin)
    lanes = [f"r:{r}" for r in RESOURCES]
    lane_keys = [key for lane in lanes for key in (KEYS.track(lane), KEYS.signals(lane), KEYS.snapshots(lane))]
    writer = connect(url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    try:
        await narrow(admin, "worker", "sig", "dump")
        before = [await admin.dump(key) for key in lane_keys]
        with capture_logs() as logs:
            async with worker_in_process(url(server, "worker"), KEYS, compact_after="0") as consumer:
                with anyio.fail_after(30):
                    while not any(e["event"] == "worker.compaction_refused" for e in logs):
                        await anyio.sleep(0.05)
                assert [await admin.dump(key) for key in lane_keys] == before
                await store.replace("other", "# Other")  # the worker still commits
                await wait_caught_up(admin, KEYS)
                await restore(admin, "worker")
                with anyio.fail_after(30):
                    while consumer.compactor.stats.compacted < len(RESOURCES):
                        await anyio.sleep(0.05)
        assert await admin.hget(KEYS.track("r:other"), "v") == "1"
        await _lanes_compacted_and_verified(admin)
    finally:
        await restore(admin, "worker")
        await writer.aclose()
