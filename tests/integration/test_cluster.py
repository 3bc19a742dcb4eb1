"""The same code on a real Redis Cluster (three primaries): writes, workers, subscription, CLI.

Every lane key shares its partition's hash tag, so each write and each commit is one
script on one slot; the worker reads one partition per XREADGROUP on a cluster and queues
script calls as FCALLs routed by their keys' slot (the library is loaded on every primary).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from signals.core.codec import FIELD
from signals.core.memory import WorkingMemoryConfig
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.cluster import LocalCluster
from tests.integration.helpers import check_lane, lanes_of, running_workers

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A three-node cluster for this module."""
    with LocalCluster() as local:
        yield local


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[Client]:
    """A cluster client."""
    c = connect(cluster.url, cluster=True)
    yield c
    await c.aclose()


@pytest.fixture
def ckeys() -> Keys:
    """A fresh namespace with 8 partitions (spread over the nodes)."""
    return Keys(namespace="c" + uuid.uuid4().hex[:10], partitions=8)


async def test_partitions_spread_over_nodes(client: Client, ckeys: Keys) -> None:
    """The partitions of a namespace land on several nodes, so the tests below cross nodes."""
    await client.initialize()  # type: ignore[union-attr]
    nodes = {client.get_node_from_key(ckeys.writes(p)).name for p in range(ckeys.partitions)}  # type: ignore[union-attr]
    assert len(nodes) >= 2


async def test_writes_and_two_workers_on_a_cluster(cluster: LocalCluster, client: Client, ckeys: Keys) -> None:
    """Replace and merge writes on 60 lanes, with repeats, two workers: every lane's chain holds."""
    markdown = WorkingMemoryStore(client, keys=ckeys)
    json_config = WorkingMemoryConfig(scope="thread", schema={"type": "object"})
    plans = WorkingMemoryStore(client, keys=ckeys, config=json_config)
    rng = random.Random(7)
    async with running_workers(cluster.url, ckeys, 2, cluster=True):
        for _ in range(600):
            user = f"user{rng.randrange(30)}"
            if rng.random() < 0.7:
                await markdown.replace(user, f"# {user}\n- fact {rng.randrange(4)}\n- more {rng.randrange(3)}")
            else:
                await plans.merge(user, {"step": rng.randrange(5), "done": rng.random() < 0.5}, thread_id=f"t-{user}")
        await wait_caught_up(client, ckeys, limit_s=60)
    lanes = await lanes_of(client, ckeys)
    assert len(lanes) == 60
    for lane in lanes:
        await check_lane(client, ckeys, lane)


async def test_subscription_and_dead_letters_on_a_cluster(cluster: LocalCluster, client: Client, ckeys: Keys) -> None:
    """A subscriber tails its lane across nodes; a poison event is dead-lettered, work goes on."""
    store = WorkingMemoryStore(client, keys=ckeys)
    facts = "".join(f"\n- fact {i}: something remembered" for i in range(10))
    await store.replace("ada", "# Ada\n- likes tea" + facts)
    await client.xadd(ckeys.writes(ckeys.partition("r:ada")), {FIELD: "{not json"})
    async with running_workers(cluster.url, ckeys, 1, cluster=True):
        await wait_caught_up(client, ckeys, limit_s=30)
        sub = Subscription(client, ckeys, "r:ada", block_ms=200)
        assert [m.value for m in await sub.bootstrap()] == ["# Ada\n- likes tea" + facts]
        await store.replace("ada", "# Ada\n- likes coffee" + facts)
        received = []
        with anyio.fail_after(10):
            while not received:
                received = await sub.poll(block_ms=200)
        assert received[-1].value == "# Ada\n- likes coffee" + facts
        assert received[-1].signal.mode == "delta"
        with anyio.fail_after(10):
            while await client.xlen(ckeys.dead_letters(ckeys.partition("r:ada"))) < 1:
                await anyio.sleep(0.05)


async def test_cli_worker_write_and_get_with_cluster_flag(cluster: LocalCluster, client: Client, ckeys: Keys) -> None:
    """``--cluster``: the CLI writes, a worker process signals, ``get`` reads it back."""
    common = ["--redis-url", cluster.url, "--cluster", "--namespace", ckeys.namespace,
              "--partitions", str(ckeys.partitions)]
    cli = [sys.executable, "-m", "workers"]
    env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning"}
    worker = await anyio.open_process([*cli, "worker", *common], env=env, stderr=subprocess.DEVNULL)
    try:
        for text in ("# Grace\n- navy", "# Grace\n- navy\n- COBOL"):
            done = await anyio.run_process([*cli, "write", *common, "--resource", "grace", "--markdown", text],
                                           env=env, check=False)
            assert done.returncode == 0, done.stderr
        got = await anyio.run_process([*cli, "get", *common, "--resource", "grace"], env=env, check=False)
        assert got.returncode == 0, got.stderr
        assert "- COBOL" in got.stdout.decode()
        await wait_caught_up(client, ckeys, limit_s=30)
    finally:
        worker.terminate()
        with anyio.fail_after(30):
            assert await worker.wait() == 0
    history = await check_lane(client, ckeys, "r:grace")
    assert [s.version for s in history] == [1, 2]
    assert history[-1].value == "# Grace\n- navy\n- COBOL"


async def test_monitor_on_a_cluster(client: Client, ckeys: Keys) -> None:
    """The worker's monitor (readiness, lag gauges, script cache, heartbeat) works across
    the nodes: a pipeline of per-partition reads, SCRIPT EXISTS on every primary."""
    from signals.streams.keys import GROUP  # noqa: PLC0415
    from workers.ops.health import Board, Monitor, check_heartbeat  # noqa: PLC0415
    from workers.ops.metrics import Layout, WorkerMetrics  # noqa: PLC0415

    metrics = WorkerMetrics()
    monitor = Monitor(client, ckeys, board=Board(1, Layout(ckeys.partitions)), slot=0, interval_s=1,
                      heartbeat_ttl_s=5, bound_s=30, instance="node-a", metrics=metrics)
    await monitor.tick()
    assert monitor.ready == 4  # no consumer group yet
    for stream in ckeys.all_writes():
        await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await client.xadd(ckeys.writes(3), {FIELD: "{}"})
    await monitor.tick()
    assert monitor.ready == 0
    assert metrics.lag[3] == 1
    assert await check_heartbeat(client, ckeys, "node-a") is None
