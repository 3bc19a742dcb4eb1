"""One costly write cannot hold up other lanes: the diff budget, end to end (issue 10, finding 7).

A 64 KiB document rewritten with its 12,500 lines shuffled used to cost the worker minutes
of CPU while every other lane waited. Now the worker gives up on the diff at its budget and
emits a snapshot. The timeout below is a hang guard only; nothing here asserts a duration.
"""

from __future__ import annotations

import random

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.memory import DEFAULT_MAX_BYTES
from signals.core.processor import POLICIES, Policy
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def _shuffled_document() -> tuple[str, str]:
    lines = [f"{i:04x}" for i in range(12_500)]
    moved = lines[:]
    random.Random(10).shuffle(moved)
    return "\n".join(lines), "\n".join(moved)


@pytest.mark.parametrize("policy", POLICIES)
async def test_shuffled_64k_write_is_a_snapshot_and_other_lanes_are_signalled(
    redis_server: RedisServer, redis: Redis, keys: Keys, policy: Policy
) -> None:
    """The shuffled rewrite becomes a snapshot, and a small write to another lane made
    right after it gets its signal (which waited minutes before the budget)."""
    original, shuffled = _shuffled_document()
    assert len(shuffled.encode()) <= DEFAULT_MAX_BYTES
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(redis_server.url, keys, 1, policy=policy):
        await store.replace("big", original)
        await wait_caught_up(redis, keys)
        await store.replace("big", shuffled)
        await store.replace("probe", "# Probe\n- one small fact")
        with anyio.fail_after(10):  # hang guard only
            while not await redis.xlen(keys.signals("r:probe")):
                await anyio.sleep(0.02)
        await wait_caught_up(redis, keys)
    signals = await check_lane(redis, keys, "r:big")
    assert [(s.version, s.mode) for s in signals] == [(1, "snapshot"), (2, "snapshot")]
    assert signals[-1].value == shuffled
    await check_lane(redis, keys, "r:probe")
