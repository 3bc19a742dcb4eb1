"""Entries and keys bigger than a worker may read at once (found by a hostile review).

A writer may XADD to any write stream: three entries of 100 MB each stopped every worker,
at every restart, resuming or reclaiming (``MemoryError`` under the Deployment's 256Mi),
and with them the honest lanes of every partition (one read covers them all). A worker's
client now bounds each reply (``max_reply_bytes``, see :func:`signals.streams.client.connect`):
what is over it is never read whole; an entry over it alone is dead-lettered by its id,
unread; a lane whose own keys are over it has its events dead-lettered; every other lane
goes on. The bound is set to its least here (1 MiB) and the entries are a few MiB.
"""

from __future__ import annotations

import anyio
import msgspec
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.agent import AgentWorkingMemory
from signals.core.codec import FIELD
from signals.errors import InvalidInputError
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.replay import read_signals
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
BOUND = 1 << 20
HUGE = "x" * (3 << 20)


async def _settled(redis: Redis, keys: Keys, letters: int, limit_s: float = 30) -> list[dict[str, object]]:
    """Wait until nothing is pending in any partition and ``letters`` dead letters exist; returns them."""
    with anyio.fail_after(limit_s):
        while True:
            pending = [await redis.xpending(keys.writes(p), GROUP) for p in range(keys.partitions)]
            lengths = [await redis.xlen(keys.dead_letters(p)) for p in range(keys.partitions)]
            if sum(int(p["pending"]) for p in pending) == 0 and sum(lengths) >= letters:
                break
            await anyio.sleep(0.05)
    out = []
    for p in range(keys.partitions):
        for _, fields in await redis.xrange(keys.dead_letters(p)):
            out.append(msgspec.json.decode(fields[FIELD]))
    return out


async def _honest(store: WorkingMemoryStore, count: int) -> list[str]:
    names = [f"honest{n}" for n in range(count)]
    for name in names:
        await store.replace(name, f"# {name}\n- fine")
    return names


async def _signalled(redis: Redis, keys: Keys, names: list[str]) -> bool:
    for name in names:
        if [s.value for _, s in await read_signals(redis, keys, f"r:{name}")] != [f"# {name}\n- fine"]:
            return False
    return True


async def test_huge_write_stream_entries_are_dead_lettered_unread(redis_server: RedisServer, redis: Redis,
                                                                  keys: Keys) -> None:
    """Three entries over the bound in one partition and one in another, among honest
    writes to lanes of every partition: each huge entry is dead-lettered by its id (its
    fields not kept), every honest lane is signalled, and the worker never stops."""
    store = WorkingMemoryStore(redis, keys=keys)
    await redis.xgroup_create(keys.writes(0), GROUP, id="0", mkstream=True)
    huge_ids = [await redis.xadd(keys.writes(0), {FIELD: HUGE}) for _ in range(3)]
    names = await _honest(store, 12)
    huge_ids.append(await redis.xadd(keys.writes(2), {FIELD: HUGE, "x": HUGE}))
    async with running_workers(redis_server.url, keys, 1, max_reply_bytes=BOUND) as (worker,):
        letters = await _settled(redis, keys, 4)
        assert sorted(str(letter["entryId"]) for letter in letters) == sorted(huge_ids)
        assert all(letter["fields"] == {} and f"over {BOUND:,} bytes" in str(letter["error"]) for letter in letters)
        assert await _signalled(redis, keys, names)
        assert worker.read_count >= 1
        more = await _honest(store, 3)  # and it goes on
        await _settled(redis, keys, 4)
        with anyio.fail_after(10):
            while not await _signalled(redis, keys, more):
                await anyio.sleep(0.05)


async def test_a_dead_consumers_huge_entries_are_reclaimed_by_id(redis_server: RedisServer, redis: Redis,
                                                                 keys: Keys) -> None:
    """Huge entries pending for a consumer that died (read whole by an unbounded client):
    the worker that reclaims them takes their ids only and dead-letters them unread."""
    store = WorkingMemoryStore(redis, keys=keys)
    await redis.xgroup_create(keys.writes(1), GROUP, id="0", mkstream=True)
    huge_ids = [await redis.xadd(keys.writes(1), {FIELD: HUGE}) for _ in range(2)]
    names = await _honest(store, 8)
    await redis.xreadgroup(GROUP, "ghost", {keys.writes(1): ">"}, count=1000)  # pending for the dead consumer
    async with running_workers(redis_server.url, keys, 1, max_reply_bytes=BOUND):
        letters = await _settled(redis, keys, 2)
        assert sorted(str(letter["entryId"]) for letter in letters) == sorted(huge_ids)
        assert await _signalled(redis, keys, names)


async def test_a_lane_whose_keys_are_over_the_bound_is_dead_lettered_alone(redis_server: RedisServer, redis: Redis,
                                                                           keys: Keys) -> None:
    """A lane whose tracking holds a value over the bound (any key of the lane a worker
    reads): its event is dead-lettered naming the bound; the batch's other lanes commit."""
    store = WorkingMemoryStore(redis, keys=keys)
    await redis.hset(keys.track("r:victim"), mapping={"wv": "0", "v": "0", "ck": HUGE})
    await store.replace("victim", "# victim\n- fine")
    names = await _honest(store, 10)
    async with running_workers(redis_server.url, keys, 1, max_reply_bytes=BOUND):
        letters = await _settled(redis, keys, 1)
        assert [str(letter["error"]) for letter in letters] == [
            f"poison: reading its lane from Redis: a reply from Redis over {BOUND:,} bytes (the client's "
            "max_reply_bytes): not read"]
        assert await _signalled(redis, keys, names)


async def test_the_bound_is_a_number_of_bytes_of_at_least_one_mib(redis_server: RedisServer) -> None:
    """A client's reply bound: at least 1 MiB (an event may be 4 Mi characters), an int;
    an over-bound reply raises ReplyTooLargeError and the client goes on. It bounds a round
    trip: a pipeline's replies count together (they were counted one by one, so many lanes'
    keys each under the bound still came in whole together)."""
    for bad in (0, BOUND - 1, 2.5, True, "32MiB"):
        with pytest.raises(InvalidInputError, match="max_reply_bytes is a number of bytes"):
            connect(redis_server.url, max_reply_bytes=bad)  # type: ignore[arg-type]
    client = connect(redis_server.url, max_reply_bytes=BOUND)
    try:
        await client.set("big", HUGE)
        with pytest.raises(ReplyTooLargeError, match=f"over {BOUND:,} bytes"):
            await client.get("big")
        assert await client.strlen("big") == len(HUGE)
        # a pipeline's replies count together: three values each under the bound were read whole
        await client.set("part", "p" * (BOUND // 2))
        assert len(await client.get("part")) == BOUND // 2
        async with client.pipeline(transaction=False) as pipe:
            for _ in range(3):
                pipe.get("part")
            with pytest.raises(ReplyTooLargeError):
                await pipe.execute()
        async with client.pipeline(transaction=False) as pipe:  # and the count starts anew each round trip
            for _ in range(3):
                pipe.strlen("part")
            assert await pipe.execute() == [BOUND // 2] * 3
    finally:
        await client.delete("big", "part")
        await client.aclose()


async def test_an_agent_loop_on_a_bounded_client_starts_past_a_huge_log_entry(redis_server: RedisServer,
                                                                             keys: Keys) -> None:
    """Any agent user may append to any thread's delivery log: entries of 40 MB each made
    another thread's loop read them whole at start (1.4 GB, or a MemoryError). On a client
    with a reply bound the read stops at the bound; the loop starts (steps from 0, a
    warning), and its deliveries are recorded as usual."""
    client = connect(redis_server.url, max_reply_bytes=BOUND)
    try:
        await client.xadd(keys.deliveries("victim-thread"), {"x": HUGE})
        store = WorkingMemoryStore(client, keys=keys)
        await store.replace("owner", "# owner\n- fine", thread_id="victim-thread")
        async with running_workers(redis_server.url, keys, 1):
            agent = AgentWorkingMemory(client, keys, resource_id="owner", thread_id="victim-thread")
            with capture_logs() as logs:
                await agent.start()
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["agent.delivery_log_unreadable"]
            with anyio.fail_after(10):
                while not (result := await agent.before_model_call([])).add:
                    await anyio.sleep(0.05)
            assert result.add[0].value == "# owner\n- fine" and result.step == 1
    finally:
        await client.aclose()


async def test_lanes_whose_keys_together_are_over_the_bound_are_read_alone(redis_server: RedisServer, redis: Redis,
                                                                           keys: Keys) -> None:
    """Several lanes whose keys are each under the bound but together over it, read in one
    pipeline: the batch is retried lane by lane, each fits, none is dead-lettered."""
    store = WorkingMemoryStore(redis, keys=keys)
    names = [f"wide{n}" for n in range(4)]
    for name in names:
        await redis.hset(keys.track(f"r:{name}"), mapping={"wv": "0", "v": "0", "ck": "c" * (BOUND // 3)})
    for name in names:
        await store.replace(name, f"# {name}\n- fine")
    async with running_workers(redis_server.url, keys, 1, max_reply_bytes=BOUND):
        assert await _settled(redis, keys, 0) == []
        with anyio.fail_after(10):
            while not await _signalled(redis, keys, names):
                await anyio.sleep(0.05)
