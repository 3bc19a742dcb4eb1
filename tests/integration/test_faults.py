"""Faults against real redis-server processes: killed workers, a restarted Redis, poison (ACLs: test_acl.py)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.core.codec import FIELD, decode_dead_letter, encode_json
from signals.core.models import WriteEvent
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import (
    check_lane,
    lanes_of,
    running_workers,
    spawn_worker,
    wait_caught_up,
    wait_ready,
)
from workers.engine.reader import GroupReader
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def _write_rounds(store: WorkingMemoryStore, lanes: int, rounds: int, tag: str,
                        reached: tuple[int, anyio.Event] | None = None) -> None:
    """Write ``rounds`` rounds over ``lanes`` lanes; ``reached`` = (round, event): set the
    event when that round begins."""
    for r in range(rounds):
        if reached is not None and r == reached[0]:
            reached[1].set()
        for i in range(lanes):
            text = f"# Profile {i}\n- round {r}\n- tag {tag}" if r % 5 else f"# Profile {i}\n- tag {tag}"
            await store.replace(f"u{i}", text)


async def _pending(redis: Redis, keys: Keys, consumer: str | None = None) -> int:
    """Entries read but not acknowledged (by ``consumer`` only, when given)."""
    total = 0
    for p in range(keys.partitions):
        summary = await redis.xpending(keys.writes(p), GROUP)
        if consumer is None:
            total += int(summary["pending"])
        else:
            total += sum(int(c["pending"]) for c in summary["consumers"] or [] if c["name"] == consumer)
    return total


async def _backlog(redis: Redis, keys: Keys) -> int:
    """Write events the group has not finished: pending, plus (up to 100 per partition) not
    yet delivered."""
    total = 0
    for p in range(keys.partitions):
        stream = keys.writes(p)
        [group] = [g for g in await redis.xinfo_groups(stream) if g["name"] == GROUP]
        total += int(group["pending"])
        total += len(await redis.xrange(stream, min="(" + group["last-delivered-id"], count=100))
    return total


async def _signalled_write_versions(redis: Redis, keys: Keys) -> dict[str, list[int]]:
    out = {}
    for lane in await lanes_of(redis, keys):
        signals = await check_lane(redis, keys, lane)
        out[lane] = [s.write_version for s in signals]
    return out


async def _kill_mid_stream(server: RedisServer, redis: Redis, keys: Keys, name: str, *, lanes: int, rounds: int,
                           kill_at: int) -> int:
    """Write rounds while a worker process runs; from round ``kill_at`` on, SIGKILL it at a
    moment it holds entries read but not acknowledged (SIGSTOP, look, SIGCONT until it
    does, so the kill cannot land between batches or after the last write). Returns how
    many entries it left pending: the fault the callers recover from."""
    store = WorkingMemoryStore(redis, keys=keys)
    proc = spawn_worker(server.url, keys, name, batch=20)
    await wait_ready(proc)
    reached = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_write_rounds, store, lanes, rounds, name, (kill_at, reached))
        await reached.wait()
        with anyio.fail_after(20):
            while True:
                proc.send_signal(signal.SIGSTOP)
                await anyio.sleep(0.05)  # commands it had sent complete; then it is frozen
                if left := await _pending(redis, keys, name):
                    break
                proc.send_signal(signal.SIGCONT)
                await anyio.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(proc.wait)
    return left


async def _finish_with_worker(server: RedisServer, redis: Redis, keys: Keys, name: str) -> dict[str, list[int]]:
    """Run a worker process named ``name`` until every write is processed, stop it with
    SIGTERM (it must exit 0), and return each lane's signalled write versions (checked)."""
    proc = spawn_worker(server.url, keys, name, batch=20)
    try:
        await wait_ready(proc)
        await wait_caught_up(redis, keys, limit_s=60)
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    return await _signalled_write_versions(redis, keys)


async def test_sigkilled_worker_restarts_without_gap_or_duplicate(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """SIGKILL mid-stream, restart under the same name: every changed write has one signal."""
    assert await _kill_mid_stream(redis_server, redis, keys, "solo", lanes=50, rounds=40, kill_at=10) > 0
    versions = await _finish_with_worker(redis_server, redis, keys, "solo")
    # every write changed the document (the round number changes), so one signal each
    assert all(v == list(range(1, 41)) for v in versions.values()), versions


async def test_sigterm_mid_stream_finishes_what_was_read_and_exits_zero(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """SIGTERM while writes pour in: the worker stops reading, processes and acknowledges
    what it had read (read-ahead included), exits 0 and leaves nothing pending."""
    rounds = 150  # about 2 s of writes: the SIGTERM lands mid-stream
    store = WorkingMemoryStore(redis, keys=keys)
    proc = spawn_worker(redis_server.url, keys, "graceful", batch=1)  # a backlog: every commit reads ahead
    await wait_ready(proc)

    async def writer(k: int) -> None:  # four writers on their own lanes outpace a batch-1 worker
        for r in range(rounds):
            for i in range(10):
                await store.replace(f"w{k}-{i}", f"# Profile {k}-{i}\n- round {r}")

    async with anyio.create_task_group() as tg:
        for k in range(4):
            tg.start_soon(writer, k)
        await anyio.sleep(0.6)
        with anyio.fail_after(10):  # the precondition: the worker is behind when it is told to stop
            while not (backlog := await _backlog(redis, keys)):
                await anyio.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            while proc.poll() is None:
                await anyio.sleep(0.02)
    assert backlog > 0
    assert proc.returncode == 0
    assert await _pending(redis, keys) == 0, "the stopped worker left entries read but unacknowledged"
    assert await _backlog(redis, keys) > 0, "the stop came after the last write: nothing was left to the next worker"
    log_text = await anyio.Path(proc.log_path).read_text()  # type: ignore[attr-defined]
    assert "worker.stopping" in log_text
    for stream in keys.all_writes():  # it left the groups (stopped consumers piled up in inspect)
        assert "graceful" not in [c["name"] for c in await redis.xinfo_consumers(stream, GROUP)]
    versions = await _finish_with_worker(redis_server, redis, keys, "graceful")
    assert all(v == list(range(1, rounds + 1)) for v in versions.values()), versions


async def test_a_consumer_leaves_only_the_groups_where_it_holds_nothing(redis: Redis, keys: Keys) -> None:
    """leave_group keeps the consumer where an entry is pending for it (deleting it there
    would drop the entry from the pending list: never claimed, never processed)."""
    reader = GroupReader(redis, keys, "leaver", batch=10, block_ms=1)
    await reader.ensure_groups()
    busy = keys.writes(0)
    await redis.xadd(busy, {"x": "y"})
    await reader.read_batch([busy])  # pending for "leaver" on partition 0
    await reader.read_batch([keys.writes(1)])  # nothing there: a consumer with nothing pending
    left = await reader.leave_group()
    assert busy not in left and keys.writes(1) in left
    assert [c["name"] for c in await redis.xinfo_consumers(busy, GROUP)] == ["leaver"]
    assert [c["name"] for c in await redis.xinfo_consumers(keys.writes(1), GROUP)] == []


async def test_a_consumer_an_acl_keeps_from_leaving_says_so() -> None:
    """An ACL file from before XGROUP DELCONSUMER was granted: nothing is reported as left
    (every stream was, while XINFO still listed the consumer), and a warning says why."""
    with RedisServer() as server:
        admin = connect(server.url)
        client = connect(f"redis://old-worker:old-worker-pw@127.0.0.1:{server.port}/0")
        try:
            await admin.execute_command("ACL", "SETUSER", "old-worker", "on", ">old-worker-pw", "~*", "+@all",
                                        "-xgroup|delconsumer")
            keys = Keys("acl", 4)
            reader = GroupReader(client, keys, "old", batch=10, block_ms=1)
            await reader.ensure_groups()
            await admin.execute_command("XGROUP", "CREATECONSUMER", keys.writes(0), GROUP, "old")
            with capture_logs() as logs:
                assert await reader.leave_group() == []
            assert [e["event"] for e in logs] == ["worker.leave_group_refused"]
            assert [c["name"] for c in await admin.xinfo_consumers(keys.writes(0), GROUP)] == ["old"]
        finally:
            await client.aclose()
            await admin.aclose()


async def test_second_worker_takes_over_a_dead_ones_pending(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A worker killed with entries pending: another consumer reclaims them, no duplicates."""
    left = await _kill_mid_stream(redis_server, redis, keys, "first", lanes=30, rounds=30, kill_at=10)
    assert await _pending(redis, keys, "first") == left > 0, "no pending entries to take over"
    other = spawn_worker(redis_server.url, keys, "second", batch=10)
    try:
        await wait_ready(other)
        await wait_caught_up(redis, keys, limit_s=60)
        with anyio.fail_after(30):  # the dead consumer's pending entries are reclaimed and acked
            while await _pending(redis, keys):
                await anyio.sleep(0.1)
    finally:
        other.terminate()
        assert other.wait(20) == 0
    await _signalled_write_versions(redis, keys)  # chains intact, no write version twice


async def test_worker_survives_redis_restart(tmp_path: Path, keys: Keys) -> None:
    """Redis (AOF on) is killed and restarted mid-run: the worker reconnects and finishes."""
    server = RedisServer(data_dir=str(tmp_path)).start()
    try:
        client = connect(server.url)
        store = WorkingMemoryStore(client, keys=keys)
        async with running_workers(server.url, keys, 1):
            await _write_rounds(store, 20, 10, "before")
            await anyio.to_thread.run_sync(server.kill)
            await anyio.sleep(0.5)
            await anyio.to_thread.run_sync(server.start)
            await _write_rounds(store, 20, 10, "after")
            await wait_caught_up(client, keys, limit_s=60)
        for lane in await lanes_of(client, keys):
            signals = await check_lane(client, keys, lane)
            assert "after" in signals[-1].value
        await client.aclose()
    finally:
        server.stop()


async def test_poison_events_are_dead_lettered(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Bad JSON, wrong types and an unknown lane go to the dead-letter stream; work goes on."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("good", "# ok")
    p = keys.partition("r:good")
    stream = keys.writes(p)
    await redis.xadd(stream, {FIELD: "{not json"})
    await redis.xadd(stream, {FIELD: '{"lane": 5}'})
    await redis.xadd(stream, {"other": "field"})
    ghost = WriteEvent(lane="r:ghost", scope="resource", format="markdown", version=1, data="x",
                       op="replace", resource_id="ghost")
    await redis.xadd(keys.writes(keys.partition("r:ghost")), {FIELD: encode_json(ghost)})
    async with running_workers(redis_server.url, keys, 1):
        await store.replace("good", "# ok\n- still working")
        await wait_caught_up(redis, keys)
        with anyio.fail_after(10):
            while sum([await redis.xlen(keys.dead_letters(q)) for q in range(keys.partitions)]) < 4:
                await anyio.sleep(0.05)
    letters = []
    for q in range(keys.partitions):
        letters += [decode_dead_letter(f[FIELD]) for _, f in await redis.xrange(keys.dead_letters(q))]
    reasons = sorted(letter.error for letter in letters)
    assert len(letters) == 4
    assert any("unknown lane 'r:ghost'" in r for r in reasons)
    assert all(r.startswith("poison") for r in reasons)
    assert (await check_lane(redis, keys, "r:good"))[-1].value == "# ok\n- still working"


def test_embedded_server_starts_and_stops() -> None:
    """The embedded default answers PING and frees its port at stop."""
    server = RedisServer().start()
    assert server._ping()
    server.stop()
    time.sleep(0.1)
    assert not server._ping()


async def test_tracking_read_of_a_lane_moved_and_trimmed_meanwhile_is_retried(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A worker that read tracking v1 after another worker moved the lane on and trimmed v1
    away gets no base text for it (the lane is recomputed), never an error that stops it;
    a tracking that names the stream's last signal at another version than that signal's
    is reported as misnumbered (the lane is repaired)."""
    from workers.engine.cache import TrackingCache  # noqa: PLC0415

    store = WorkingMemoryStore(redis, keys=keys)
    tails = []
    async with running_workers(redis_server.url, keys, 1, snapshot_every=1, retain_signals=1):
        for text in ("# one", "# two", "# three"):
            await store.replace("moved", text)
            await wait_caught_up(redis, keys)
            tails.append(await redis.hget(keys.track("r:moved"), "tail"))
    cache = TrackingCache(redis, keys, capacity=10)
    [(tail, _)] = await redis.xrevrange(keys.signals("r:moved"), count=1)
    assert tail == tails[2]
    assert await cache.values_for({"r:moved": (1, tails[0], 1)}) == ({}, {})
    assert await cache.values_for({"r:moved": (1, tail, 1)}) == ({}, {"r:moved": 3})
    assert await cache.values_for({"r:moved": (3, tail, 1)}) == ({"r:moved": "# three"}, {})
