"""A worker says so when Redis may evict its keys (``maxmemory-policy`` other than
``noeviction``): under ``allkeys-lru`` versions were reused and events dead-lettered as
"unknown lane", and nothing warned."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from signals.streams.keys import Keys
from tests.trust_boundary.support import worker_in_process
from workers.runtime.embedded import RedisServer
from workers.runtime.worker import warn_if_evicting

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
async def test_a_worker_warns_of_an_evicting_policy(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                    policy: str) -> None:
    await redis.config_set("maxmemory-policy", policy)
    try:
        with capture_logs() as logs:
            async with worker_in_process(redis_server.url, keys):
                pass
        warned = [e for e in logs if e["event"] == "worker.eviction_policy"]
        assert [e["maxmemory_policy"] for e in warned] == [policy]
    finally:
        await redis.config_set("maxmemory-policy", "noeviction")


async def test_no_warning_under_noeviction(redis: Redis) -> None:
    assert await redis.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert await warn_if_evicting(redis) is None
