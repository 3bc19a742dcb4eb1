"""What a writer's credentials alone could do to other lanes and to the worker process
(a hostile-review round of 2026-12-02), one test each, against the session's real
redis-server. Each failed on 3847935, before its fix.
"""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from signals.errors import RedisBusyError
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.attacks.support import worker_in_process
from tests.integration.helpers import check_lane, wait_caught_up
from workers.embedded import RedisServer
from workers.maintenance import id_after

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
LARGEST_ID = f"{2**64 - 1}-{2**64 - 1}"


def test_the_id_after_the_largest_part_carries_over() -> None:
    assert id_after("5-7") == "5-8"
    assert id_after(f"5-{2**64 - 1}") == "6-0"
    assert id_after(LARGEST_ID) is None
    assert id_after("junk") is None


async def test_an_entry_with_the_largest_stream_id_stops_neither_the_worker_nor_its_partition(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A writer may XADD to a write stream with an id of its choosing. With the largest
    one, the maintenance trim asked for ``MINID <seq + 1>`` (not an id): the worker exited,
    and again after every restart; and the stream, out of ids, refused every later write
    of its partition. Now the worker keeps going, and once the entry is dead-lettered the
    stream numbers its entries from the start again: the partition's lanes take writes
    and are signalled."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("alice", "# Alice\n- likes tea")
    stream = keys.writes(keys.partition("r:alice"))
    async with worker_in_process(redis_server.url, keys, maintenance_interval_s=0.1):
        await wait_caught_up(redis, keys)
        await redis.xadd(stream, {"e": "junk"}, id=LARGEST_ID)
        with anyio.fail_after(20):
            while not await redis.xlen(keys.dead_letters(keys.partition("r:alice"))):
                await anyio.sleep(0.05)
            while True:  # the worker restarts the stream at its next maintenance
                info = await redis.xinfo_stream(stream)
                if info["last-generated-id"] != LARGEST_ID:
                    break
                await anyio.sleep(0.05)
        await store.replace("alice", "# Alice\n- likes green tea")
        await wait_caught_up(redis, keys)
    signals = await check_lane(redis, keys, "r:alice")
    assert signals[-1].value == "# Alice\n- likes green tea"
    groups = {g["name"]: g for g in await redis.xinfo_groups(stream)}
    assert groups[GROUP]["pending"] == 0


async def test_a_write_to_a_stream_out_of_ids_is_refused_for_now_naming_the_stream(
    redis: Redis, keys: Keys
) -> None:
    """Before a worker restarts it, a write to such a partition was a CorruptDataError with
    Redis's words only; it is a RedisBusyError (retry) that names the stream and why."""
    store = WorkingMemoryStore(redis, keys=keys)
    stream = keys.writes(keys.partition("r:bob"))
    await redis.xadd(stream, {"e": "junk"}, id=LARGEST_ID)
    with pytest.raises(RedisBusyError, match="run out of stream ids") as caught:
        await store.replace("bob", "# Bob")
    assert stream in str(caught.value)
    assert await redis.hget(keys.doc("r:bob"), "data") is None  # nothing half-written
