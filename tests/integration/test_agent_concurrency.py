"""One AgentWorkingMemory is one model's context window: concurrent calls are refused (issue 30, finding 9).

Two ``before_model_call``s at once on one object each read the new version and each
added it: the same version delivered twice (and logged twice). The object refuses the
second call with :class:`~signals.errors.ConcurrentUseError` instead; a Subscription polled
from two tasks serialises its reads, so each signal reaches one of them once.
"""

from __future__ import annotations

import anyio
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory, ModelCallResult
from signals.errors import ConcurrentUseError
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_two_concurrent_model_calls_on_one_agent_deliver_a_version_once(
        redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Both calls start before either returns: one delivers version 2, the other is refused
    naming the rule; the delivery log holds version 2 once; the next call works."""
    store = WorkingMemoryStore(redis, keys=keys)
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    async with running_workers(redis_server.url, keys, 1):
        await store.replace("u", "# Notes\n- one")
        await wait_caught_up(redis, keys)
        await agent.start()
        held = {inj.id for inj in (await agent.before_model_call(set())).add}
        await store.replace("u", "# Notes\n- one\n- two")
        await wait_caught_up(redis, keys)
    results: list[ModelCallResult] = []
    refused: list[ConcurrentUseError] = []

    async def call() -> None:
        try:
            results.append(await agent.before_model_call(held))
        except ConcurrentUseError as e:
            refused.append(e)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        tg.start_soon(call)
    assert len(results) == 1 and len(refused) == 1
    assert "its own AgentWorkingMemory" in str(refused[0])
    assert [inj.version for inj in results[0].add] == [2]
    records = await DeliveryLog(redis, keys).read("t1")
    assert [r.version for r in records] == [1, 2]
    held |= {inj.id for inj in results[0].add}
    assert (await agent.before_model_call(held)).add == ()  # and it goes on


async def test_a_subscription_polled_from_two_tasks_delivers_each_signal_once(
        redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Two tasks poll one subscription at once: between them every version once, in order,
    and the subscription never takes the other's read for a lane that went back."""
    store = WorkingMemoryStore(redis, keys=keys)
    sub = Subscription(redis, keys, "r:u")
    async with running_workers(redis_server.url, keys, 1):
        for n in range(1, 6):
            await store.replace("u", f"# Notes\n- {n}")
        await wait_caught_up(redis, keys)
    got: list[list[int]] = []

    async def poll() -> None:
        got.append([m.signal.version for m in await sub.catch_up()])

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        tg.start_soon(poll)
    assert sorted(v for batch in got for v in batch) == [1, 2, 3, 4, 5]
    assert sub.generation == 0
