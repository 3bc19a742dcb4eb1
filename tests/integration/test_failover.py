"""Failover under load (issue 13, scope 5): SIGKILL the master while writers, a worker
process and a subscriber run; a replica takes over and nothing is restarted.

Sentinel: a master, two replicas and three sentinels (tests/integration/sentinel.py). On a
Redis Cluster: three primaries, one with a replica, and that primary is killed; once its
replica holds the slots the killed node is started again and comes back as the new
primary's replica, so writes that wait for one replica can be acknowledged again.

Writers use the library with a durability setting (``WAIT 1``) and an idempotency key per
write, and retry every refused or unconfirmed write with the same key until it is
acknowledged. The checks: each lane's document is its last acknowledged write; every
acknowledged write version has exactly one signal, with that write's text; every lane
verifies; the subscriber received signals after the promotion and ends on the stored
text; the worker process ran throughout (through Sentinel it logged its backoff) and stops
with exit 0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from redis.asyncio.cluster import RedisCluster

from signals.core.cachekey import js_trim
from signals.errors import DurabilityError, RedisUnavailableError
from signals.streams.client import Client, connect
from signals.streams.durability import Durability
from signals.streams.keys import Keys, lane_id
from signals.streams.progress import wait_caught_up
from signals.streams.replay import materialise, read_signals
from signals.streams.sentinel import connect_sentinel
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from signals.streams.verify import verify_lane
from tests.integration.cluster import LocalCluster
from tests.integration.helpers import check_lane
from tests.integration.sentinel import MASTER_NAME, LocalSentinels
from tests.integration.test_tls import _ca, _signed

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(120)]
ROOT = Path(__file__).parents[2]
RESOURCES = [f"u{i}" for i in range(6)]  # the lanes written (on the cluster: as many, on the killed primary)
DURABLE = Durability(replicas=1, timeout_ms=2000)
#: The cluster's primary that gets a replica and is killed: it holds partitions 0 and 1 of 4
#: (slots of the hash tags {p0} and {p1}); the other primaries have no replica, so durable
#: writes go only to lanes of those two partitions there.
KILLED = 2


@dataclass
class Load:
    """What the writers and the subscriber saw."""

    resources: list[str]
    acked: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    refused: Counter[str] = field(default_factory=Counter)
    acked_after_promotion: int = 0
    promoted: bool = False
    delivered: list[tuple[int, bool]] = field(default_factory=list)  # (version, after the promotion)


async def _writer(store: WorkingMemoryStore, resource: str, stop: anyio.Event, load: Load) -> None:
    """Write ``resource`` until stopped, each write retried with its idempotency key until acknowledged."""
    n = 0
    while not stop.is_set():
        n += 1
        text = f"# {resource}\n- write {n}\n" + "".join(f"- fact {i}\n" for i in range(n % 5))
        key = f"{resource}-{n}"
        while True:
            try:
                version = await store.replace(resource, text, idempotency_key=key)
                break
            except (RedisUnavailableError, DurabilityError) as e:  # RedisBusyError included
                load.refused[type(e).__name__] += 1
                await anyio.sleep(0.05)
        load.acked[resource].append((version, text))
        load.acked_after_promotion += load.promoted
        await anyio.sleep(0.005)


async def _subscriber(sub: Subscription, load: Load, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    await sub.bootstrap()
    task_status.started()
    async for item in sub:
        load.delivered.append((item.signal.version, load.promoted))


def _spawn_worker(connection: list[str], keys: Keys) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "workers", "worker", *connection, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions), "--consumer-name", "ha-w1"]
    env = {**os.environ, "WM_SIGNALS_MAINTENANCE_INTERVAL_S": "0.2", "WM_SIGNALS_CLAIM_IDLE_MS": "500",
           "WM_SIGNALS_RETAIN_SIGNALS": "100000", "WM_SIGNALS_LOG_LEVEL": "info", "WM_SIGNALS_LOG_FORMAT": "json"}
    log = tempfile.NamedTemporaryFile(prefix="wm-failover-worker-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    proc.log_path = log.name  # type: ignore[attr-defined]
    return proc


async def _wait_logged(proc: subprocess.Popen[bytes], event: str, limit_s: float = 30.0) -> str:
    path = Path(proc.log_path)  # type: ignore[attr-defined]
    with anyio.fail_after(limit_s):
        while event not in (text := await anyio.to_thread.run_sync(path.read_text)):
            assert proc.poll() is None, f"worker exited with {proc.returncode}: {text[-800:]}"
            await anyio.sleep(0.05)
    return text


async def _run_failover(client: Client, sub_client: Client, keys: Keys, worker: subprocess.Popen[bytes],
                        kill: object, promoted: object, resources: list[str], *, backs_off: bool = True) -> Load:
    """Load on ``resources``, kill (``kill()``), wait for ``promoted()`` (async), more load;
    then stop everything. ``backs_off``: the worker must have logged its backoff (through
    Sentinel a failed command raises at once; redis-py's cluster client first retries on its
    own, which may ride out the outage)."""
    load = Load(resources, {r: [] for r in resources})
    store = WorkingMemoryStore(client, keys=keys, durability=DURABLE)
    watched = lane_id("resource", resources[0], None)
    sub = Subscription(sub_client, keys, watched, block_ms=200, reconnect_timeout_s=60)
    stop = anyio.Event()
    try:
        await _wait_logged(worker, "worker.ready")
        async with anyio.create_task_group() as tg:
            await tg.start(_subscriber, sub, load)
            for resource in resources:
                tg.start_soon(_writer, store, resource, stop, load)
            with anyio.fail_after(30):
                while min(len(a) for a in load.acked.values()) < 20:
                    await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(kill)  # type: ignore[arg-type]
            await promoted()  # type: ignore[operator]
            load.promoted = True
            with anyio.fail_after(90):  # generous: a loaded 2-core host (the suite runs in 3 processes) resyncs slowly
                while load.acked_after_promotion < 20 * len(resources) or not any(a for _, a in load.delivered):
                    await anyio.sleep(0.05)
            stop.set()
            await wait_caught_up(client, keys, limit_s=30)
            with anyio.fail_after(10):  # the subscriber's last signal is the stored document's
                while not load.delivered or sub.value != js_trim(load.acked[resources[0]][-1][1]):
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        text = await _wait_logged(worker, "worker.redis_unavailable" if backs_off else "worker.ready")
        assert worker.poll() is None, f"the worker exited: {text[-800:]}"
        worker.send_signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(worker.wait, 30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return load


async def _check(client: Client, keys: Keys, load: Load) -> None:
    """Every acknowledged write stored and signalled exactly once, with its text; every lane verifies."""
    assert sum(load.refused.values()), "no write was refused: the kill did not land during the load"
    store = WorkingMemoryStore(client, keys=keys, read_only=True)
    for resource, acks in load.acked.items():
        lane = lane_id("resource", resource, None)
        doc = await store.get(resource)
        assert doc is not None
        assert (doc.version, doc.data) == acks[-1], f"{lane}: the document is not the last acknowledged write"
        await check_lane(client, keys, lane)  # no write version signalled twice, the chain rebuilds
        text_at = {m.signal.write_version: m.value for m in materialise(await read_signals(client, keys, lane))}
        for version, text in acks:
            assert version in text_at, f"{lane}: acknowledged write version {version} has no signal"
            assert text_at[version] == js_trim(text), f"{lane}: the signal of version {version} has another text"
        await verify_lane(client, keys, lane)
    versions = [v for v, _ in load.delivered]
    assert versions == sorted(set(versions)), "the subscriber got a version twice or out of order"


@pytest.fixture
def sentinels() -> Iterator[LocalSentinels]:
    with LocalSentinels() as deployment:
        yield deployment


@pytest.fixture
def ha_keys() -> Keys:
    return Keys(namespace="ha" + uuid.uuid4().hex[:8], partitions=4)


@pytest.fixture
async def sentinel_clients(sentinels: LocalSentinels) -> AsyncIterator[tuple[Client, Client]]:
    clients = (connect_sentinel(sentinels.addresses, MASTER_NAME), connect_sentinel(sentinels.addresses, MASTER_NAME))
    yield clients
    for c in clients:
        await c.aclose()


async def test_sentinel_failover_under_load(sentinels: LocalSentinels, sentinel_clients: tuple[Client, Client],
                                            ha_keys: Keys) -> None:
    """Kill the master mid-load: writers, ``worker --sentinel`` and a subscriber carry on."""
    client, sub_client = sentinel_clients
    worker = _spawn_worker(["--sentinel", sentinels.addresses, "--sentinel-master", MASTER_NAME], ha_keys)
    old = sentinels.master.port

    async def promoted() -> None:
        await anyio.to_thread.run_sync(sentinels.wait_promoted, old)

    load = await _run_failover(client, sub_client, ha_keys, worker, sentinels.master.kill, promoted, RESOURCES)
    assert sentinels.master_port() != old
    await _check(client, ha_keys, load)


async def test_concurrent_discoveries_keep_every_sentinel(sentinels: LocalSentinels) -> None:
    """Tasks reconnecting at once each ask the sentinels for the master; with the first
    sentinel down, redis-py's unserialised discovery wrote one sentinel over another in
    its list (and dropped that client with its connections open). Every sentinel stays."""
    client = connect_sentinel(sentinels.addresses, MASTER_NAME)
    try:
        sentinels.kill_sentinel(0)
        manager = client.connection_pool.sentinel_manager  # type: ignore[attr-defined]
        found = await asyncio.gather(*(manager.discover_master(MASTER_NAME) for _ in range(8)))
        assert {port for _, port in found} == {sentinels.master.port}
        ports = sorted(s.connection_pool.connection_kwargs["port"] for s in manager.sentinels)
        assert ports == sorted(sentinels.ports)
    finally:
        await client.aclose()


async def test_a_sentinel_client_serves_more_concurrent_calls_than_connections(sentinels: LocalSentinels) -> None:
    """As connect()'s clients (tests/integration/test_connections.py): the master's pool
    waits for a free connection; redis-py's refused the call past max_connections."""
    client = connect_sentinel(sentinels.addresses, MASTER_NAME, max_connections=4)
    try:
        replies = await asyncio.gather(*(client.blpop(f"wm-test-nothing-{i}", 0.2) for i in range(12)))
        assert replies == [None] * 12
    finally:
        await client.aclose()


@pytest.fixture
def ha_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(replicate=(KILLED,), node_timeout_ms=1000) as cluster:
        yield cluster


async def test_cluster_failover_under_load(ha_cluster: LocalCluster, ha_keys: Keys) -> None:
    """Kill a primary mid-load: its replica takes over its slots; writers, ``worker --cluster``
    and a subscriber carry on."""
    url = ha_cluster.servers[0].url  # a node that stays up
    client, sub_client = connect(url, cluster=True), connect(url, cluster=True)
    victim, replica = ha_cluster.servers[KILLED], ha_cluster.replicas[0]
    assert isinstance(client, RedisCluster)
    await client.initialize()
    owner = client.get_node_from_key(ha_keys.writes(0))
    assert owner is not None
    assert owner.port == victim.port, "partition 0 is not on the primary that has a replica"
    # durable writes need a replica: the lanes of the partitions on the primary that has one
    resources = [r for r in (f"u{i}" for i in range(200))
                 if ha_keys.partition(lane_id("resource", r, None)) in (0, 1)][:len(RESOURCES)]
    worker = _spawn_worker(["--redis-url", url, "--cluster"], ha_keys)

    async def promoted() -> None:
        probe = connect(replica.url)
        try:
            with anyio.fail_after(30):
                while (await probe.info("replication"))["role"] != "master":
                    await anyio.sleep(0.05)
        finally:
            await probe.aclose()
        await anyio.to_thread.run_sync(victim.start)  # back as the new primary's replica

    try:
        load = await _run_failover(client, sub_client, ha_keys, worker, victim.kill, promoted, resources,
                                   backs_off=False)
        await _check(client, ha_keys, load)
    finally:
        await client.aclose()
        await sub_client.aclose()


def test_cli_through_password_protected_sentinels() -> None:
    """The CLI's Sentinel mode with passwords on both sides: the sentinels' from
    ``WM_SIGNALS_SENTINEL_PASSWORD``, the data nodes' from a host-less ``--redis-url``; a
    wrong sentinel password is exit 1 naming the service."""
    with LocalSentinels(password="node-secret", sentinel_password="sentinel-secret") as deployment:
        namespace = "ha" + uuid.uuid4().hex[:8]
        common = ["--sentinel", deployment.addresses, "--sentinel-master", MASTER_NAME,
                  "--redis-url", "redis://:node-secret@/0", "--namespace", namespace, "--resource", "ada"]
        env = {**os.environ, "WM_SIGNALS_SENTINEL_PASSWORD": "sentinel-secret"}

        def cli(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "workers", *args, *common], cwd=ROOT, env={**env, **extra},
                                  capture_output=True, text=True, timeout=60, check=False)

        wrote = cli("write", "--markdown", "# Ada\n- likes tea", "--min-replicas", "2")
        assert (wrote.returncode, wrote.stdout) == (0, "1\n"), wrote.stderr
        got = cli("get")
        assert (got.returncode, got.stdout) == (0, "# Ada\n- likes tea\n"), got.stderr
        refused = cli("get", WM_SIGNALS_SENTINEL_PASSWORD="wrong")
        assert refused.returncode == 1 and MASTER_NAME in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_cli_through_tls_sentinels(tmp_path: Path) -> None:
    """Sentinels and data nodes on TLS only, client certificates required: a host-less
    ``rediss://`` URL and the ``--tls-*`` flags reach both; a wrong CA is exit 1."""
    ca = _ca(tmp_path, "ca")
    other_ca, _ = _ca(tmp_path, "other-ca")
    cert, key = _signed(tmp_path, "node", ca, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    with LocalSentinels(tls=(str(cert), str(key), str(ca[0]))) as deployment:
        common = ["--sentinel", deployment.addresses, "--sentinel-master", MASTER_NAME, "--redis-url", "rediss://@/0",
                  "--tls-cert", str(cert), "--tls-key", str(key), "--namespace", "ha" + uuid.uuid4().hex[:8],
                  "--resource", "ada"]

        def cli(*args: str, ca_file: Path = ca[0]) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "workers", *args, *common, "--tls-ca", str(ca_file)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)

        wrote = cli("write", "--markdown", "# Ada", "--min-replicas", "1")
        assert (wrote.returncode, wrote.stdout) == (0, "1\n"), wrote.stderr
        got = cli("get")
        assert (got.returncode, got.stdout) == (0, "# Ada\n"), got.stderr
        refused = cli("get", ca_file=other_ca)
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr
