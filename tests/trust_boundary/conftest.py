"""Fixtures of the trust-boundary tests: clients logged in as the generated ACL users."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from signals.streams.acl import acl_users
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from tests.trust_boundary.support import PASSWORDS
from workers.runtime.embedded import RedisServer


@pytest.fixture
async def as_role(redis_server: RedisServer, redis: Redis, keys: Keys) -> AsyncIterator[Callable[[str], Client]]:
    """Clients of the test's namespace logged in as one of its generated ACL users."""
    users = acl_users(keys, PASSWORDS)
    for user, rules in users.items():
        await redis.execute_command("ACL SETUSER", user, *rules)
    clients: list[Client] = []

    def open_as(role: str) -> Client:
        client = connect(f"redis://{keys.namespace}-{role}:{PASSWORDS[role]}@127.0.0.1:{redis_server.port}/0")
        clients.append(client)
        return client

    yield open_as
    for client in clients:
        await client.aclose()
    for user in users:
        await redis.execute_command("ACL DELUSER", user)
