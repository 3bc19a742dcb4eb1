"""An agent loop or subscriber on a namespace no worker serves says so, once; a Redis that
cannot be reached is ``RedisUnavailableError``.

Without a worker, writes are stored and queued and a subscriber receives nothing: the
library's one warning (``subscribe.no_worker``, naming the namespace) is what tells the
newcomer why (see :mod:`signals.streams.served`).
"""

from __future__ import annotations

from typing import Any

import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals import AgentWorkingMemory, RedisUnavailableError, Subscription, WorkingMemoryStore, connect
from signals.integrations.openai_chat import OpenAIChatWorkingMemory
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import RedisConnectionError
from signals.streams.served import unserved_reason
from tests.integration.helpers import running_workers, wait_caught_up
from tests.ports import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def _no_worker(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "subscribe.no_worker"]


async def _write(redis: Redis, keys: Keys, resource: str = "ada") -> None:
    await WorkingMemoryStore(redis, keys=keys).replace(resource, "# Ada\n- likes tea")


async def test_agent_start_warns_once_naming_the_namespace(redis: Redis, keys: Keys) -> None:
    """``AgentWorkingMemory.start()`` with no worker ever run: one warning naming the
    namespace and the missing consumer group; a second loop in the same namespace adds none."""
    await _write(redis, keys)
    with capture_logs() as logs:
        assert await AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="t1").start() == []
        await AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="t2").start()
    [warning] = _no_worker(logs)
    assert warning["log_level"] == "warning"
    assert warning["namespace"] == keys.namespace
    assert keys.namespace in warning["reason"] and f"consumer group {GROUP!r}" in warning["reason"]


async def test_an_adapters_first_call_warns(redis: Redis, keys: Keys) -> None:
    """An adapter's first call (the OpenAI Chat helper's ``prepare``, without ``start``) warns too."""
    await _write(redis, keys)
    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="t1"))
    with capture_logs() as logs:
        await wm.prepare([{"role": "user", "content": "hi"}])
        await wm.prepare([{"role": "user", "content": "hi again"}])
    [warning] = _no_worker(logs)
    assert warning["namespace"] == keys.namespace and warning["lane"] == "r:ada"


async def test_a_subscription_warns(redis: Redis, keys: Keys) -> None:
    """A library ``Subscription`` polled on a namespace with no worker warns at its first read."""
    with capture_logs() as logs:
        assert await Subscription(redis, keys, "r:ada").poll() == []
    [warning] = _no_worker(logs)
    assert warning["namespace"] == keys.namespace


async def test_a_group_left_by_every_worker_is_named(redis: Redis, keys: Keys) -> None:
    """A consumer group with no consumer (every worker stopped): the reason says so."""
    await redis.xgroup_create(keys.writes(keys.partition("r:ada")), GROUP, id="0", mkstream=True)
    reason = await unserved_reason(redis, keys, "r:ada")
    assert reason is not None and "has no consumer" in reason and keys.namespace in reason


async def test_a_served_namespace_gets_no_warning(redis_server: Any, redis: Redis, keys: Keys) -> None:
    """With a worker running, the agent's start delivers the snapshot and warns of nothing."""
    await _write(redis, keys)
    async with running_workers(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        assert await unserved_reason(redis, keys, "r:ada") is None
        with capture_logs() as logs:
            [item] = await AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="t1").start()
        assert item.signal.mode == "snapshot"
        assert _no_worker(logs) == []


async def test_start_against_a_down_redis_is_redis_unavailable(keys: Keys) -> None:
    """A Redis that refuses connections: ``start()`` raises ``RedisUnavailableError`` (also
    redis-py's ``ConnectionError``, so code written against redis-py still catches it)."""
    client = connect(f"redis://127.0.0.1:{free_port()}/0")
    try:
        for thread_id in (None, "t1"):  # the thread check reads first when there is a thread
            agent = AgentWorkingMemory(client, keys, resource_id="ada", thread_id=thread_id)
            with pytest.raises(RedisUnavailableError):
                await agent.start()
        with pytest.raises(RedisUnavailableError):
            await WorkingMemoryStore(client, keys=keys).get(resource_id="ada")
        with pytest.raises(redis_exc.ConnectionError) as caught:  # a subscription's own read, not translated
            await Subscription(client, keys, "r:ada").poll()
        assert isinstance(caught.value, RedisConnectionError)
    finally:
        await client.aclose()
