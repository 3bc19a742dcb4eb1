"""The MCP server on a real three-node Redis Cluster: one read loop per partition, lanes on
every node, both subscription styles notified."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ResourceUpdatedNotification

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.cluster import LocalCluster
from tests.integration.helpers import running_workers
from workers.mcp.access import Caller
from workers.mcp.server import Options, build_server

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as local:
        yield local


async def test_notifications_from_lanes_on_every_node(cluster: LocalCluster) -> None:
    """Threads spread over the partitions (so over the nodes); each write reaches both clients."""
    keys = Keys(namespace="c" + uuid.uuid4().hex[:8], partitions=8)
    redis = connect(cluster.url, cluster=True)
    store = WorkingMemoryStore(redis, keys=keys)
    threads = [f"t{i}" for i in range(8)]
    assert len({keys.partition("t:" + t) for t in threads}) > 2
    for thread in threads:
        await store.create_thread(thread, "alice")
    server = build_server(store, caller=Caller("alice"), options=Options(cluster=True, block_ms=500))
    messages: list[Any] = []

    async def collect(message: Any) -> None:
        messages.append(message)

    uris = [f"wm://thread/{t}" for t in threads]
    try:
        async with (running_workers(cluster.url, keys, 1, cluster=True),
                    Client(server, mode="legacy", message_handler=collect) as old, Client(server) as new):
            for uri in uris:
                await old.subscribe_resource(uri)
            async with new.listen(resource_subscriptions=uris) as sub:
                for thread in threads:
                    await store.replace("alice", f"# {thread}", thread_id=thread, scope="thread")
                heard: set[str] = set()
                with anyio.fail_after(20):
                    while len(heard) < len(uris):
                        heard.add((await sub.__anext__()).uri)  # type: ignore[union-attr]
                    while {m.params.uri for m in messages if isinstance(m, ResourceUpdatedNotification)} != set(uris):
                        await anyio.sleep(0.02)
    finally:
        await redis.aclose()
