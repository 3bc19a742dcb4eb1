"""Fixtures of the trust-boundary tests: clients logged in as the generated ACL users, and
a server of a test module's own whose ACL a test may narrow (``server``, ``admin``: see
:mod:`tests.trust_boundary.narrowed_acl`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import cast

import pytest
from redis.asyncio import Redis

from signals.streams.acl import ROLES, acl_users
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from tests.trust_boundary.narrowed_acl import restore, start_server, url
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


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the module's own, loaded with the generated ACL users."""
    srv = start_server(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))
    yield srv
    srv.stop()


@pytest.fixture
async def admin(server: RedisServer) -> AsyncIterator[Redis]:
    """The module server's admin, after emptying it and restoring every role's generated ACL."""
    client = cast(Redis, connect(url(server, "admin")))
    await client.flushall()
    for role in ROLES:  # each test starts from the generated ACL
        await restore(client, role)
    yield client
    await client.aclose()
