"""One client shared by many concurrent calls (an agent server's store): the connection
pool waits for a free connection instead of failing on a healthy Redis."""

from __future__ import annotations

import uuid

import anyio
import pytest
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_more_concurrent_writes_than_connections_all_succeed(redis_server: RedisServer, keys: Keys) -> None:
    """redis-py's own pool refused the 101st concurrent command ("Too many connections"):
    200 concurrent writes on one store failed by the dozen as RedisUnavailableError."""
    client = connect(redis_server.url)
    store = WorkingMemoryStore(client, keys=keys)
    versions: list[int] = []

    async def write(n: int) -> None:
        versions.append(await store.replace(f"user{n}", f"# User {n}\n- fact {n}"))

    try:
        async with anyio.create_task_group() as tg:
            for n in range(300):
                tg.start_soon(write, n)
        assert versions == [1] * 300
        assert await client.scard(keys.lanes(keys.partition("r:user0"))) > 0
    finally:
        await client.aclose()


async def test_a_command_waits_for_a_connection_then_says_why_it_gave_up(redis_server: RedisServer) -> None:
    client = connect(redis_server.url, max_connections=2, pool_wait_s=0.3)
    try:
        async with anyio.create_task_group() as tg:  # two blocking commands hold both connections for 1 s
            tg.start_soon(client.blpop, "wm-test-nothing-1", 1)
            tg.start_soon(client.blpop, "wm-test-nothing-2", 1)
            with anyio.fail_after(5):  # both connections taken (not a timing: waited for)
                while len(client.connection_pool._in_use_connections) < 2:  # type: ignore[attr-defined]
                    await anyio.sleep(0.01)
            with pytest.raises(redis_exc.ConnectionError, match="all 2 connections of this client stayed in use"):
                await client.ping()
        assert await client.ping()  # released: the next command gets one at once
    finally:
        await client.aclose()


async def test_a_write_refused_by_the_acl_is_a_permission_error_not_corrupt_data(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """The write script's NOPERM became CorruptDataError ("writing r:x: NOPERM ..."), exit
    2 as bad input, while every other command's NOPERM is redis-py's NoPermissionError
    (exit 1, "other errors"): the deployment's ACL is not the lane's data."""
    user = "wm-test-noxadd-" + uuid.uuid4().hex[:6]
    await redis.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-xadd"])
    host, port = redis_server.url.removeprefix("redis://").split("/")[0].split(":")
    client = connect(f"redis://{user}:pw@{host}:{port}/0")
    try:
        with pytest.raises(redis_exc.NoPermissionError):
            await WorkingMemoryStore(client, keys=keys).replace("ivan", "# Ivan")
    finally:
        await client.aclose()
        await redis.acl_deluser(user)
    assert await redis.hget(keys.doc("r:ivan"), "data") is None
