"""The worker as an operator sees it: /metrics, /livez, /readyz, ``worker --check`` and
``worker --processes N``, on real worker processes against real redis-server processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.progress import wait_caught_up
from signals.streams.replay import read_signals
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import spawn_worker, wait_ready
from tests.ports import free_port
from workers.ops.health import Board, Monitor, check_heartbeat
from workers.ops.metrics import Layout, WorkerMetrics
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]
#: Fast health ticks and a short heartbeat, so the test waits seconds, not tens of them.
FAST = {"WM_SIGNALS_HEALTH_INTERVAL_S": "0.2", "WM_SIGNALS_HEARTBEAT_TTL_S": "1", "WM_SIGNALS_BLOCK_MS": "20",
        "WM_SIGNALS_MAINTENANCE_INTERVAL_S": "0.2", "WM_SIGNALS_CLAIM_IDLE_MS": "60000"}


def _cli(url: str, keys: Keys, *args: str) -> list[str]:
    return [sys.executable, "-m", "workers", "worker", "--redis-url", url, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions), *args]


def _spawn(url: str, keys: Keys, *args: str, **extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, **FAST, "WM_SIGNALS_LOG_FORMAT": "json", "WM_SIGNALS_LOG_LEVEL": "info", **extra}
    log = tempfile.NamedTemporaryFile(prefix="wm-ops-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(_cli(url, keys, *args), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    proc.log_path = log.name  # type: ignore[attr-defined]
    return proc


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def _http(port: int, path: str) -> tuple[int, str]:
    return await anyio.to_thread.run_sync(_get, port, path)


async def _metrics(port: int) -> dict[str, float]:
    """One scrape: ``name{label="v"}`` (labels sorted) -> value."""
    status, text = await _http(port, "/metrics")
    assert status == 200
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def _sum(metrics: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(prefix + "{"))


async def _until(what: str, fn: Callable[[], Any], limit_s: float = 30.0) -> Any:
    """Poll ``fn`` (async) until it returns something truthy."""
    with anyio.fail_after(limit_s):
        while not (value := await fn()):
            await anyio.sleep(0.1)
    assert value, what
    return value


async def _ready(proc: subprocess.Popen[bytes], port: int) -> None:
    async def ready() -> bool:
        assert proc.poll() is None, _log(proc)[-2000:]
        try:
            return (await _http(port, "/readyz"))[0] == 200
        except OSError:  # not listening yet
            return False
    await _until("ready", ready, 60)


def _check(url: str, keys: Keys, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(url, keys, "--check", "--consumer-name", name), cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def _lanes(keys: Keys, per_partition: int) -> list[str]:
    """Resource ids whose lanes cover every partition ``per_partition`` times."""
    chosen: dict[int, list[str]] = {p: [] for p in range(keys.partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in chosen.values()):
        ids = chosen[keys.partition(f"r:u{n}")]
        if len(ids) < per_partition:
            ids.append(f"u{n}")
        n += 1
    return [rid for ids in chosen.values() for rid in ids]


def _log(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log_path).read_text()  # type: ignore[attr-defined]


def _exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _children(pid: int) -> list[int]:
    """The worker processes a supervisor spawned (not multiprocessing's resource tracker)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    pids = [int(p) for p in text.split()]
    return [p for p in pids if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]


@pytest.fixture
def worker_port() -> Iterator[int]:
    yield free_port()


async def test_processes_2_metrics_count_what_was_written_and_lag_follows_a_paused_child(
    redis_server: RedisServer, redis: Redis, keys: Keys, worker_port: int
) -> None:
    """Two consumer processes behind one endpoint: the scraped counters equal what the
    test wrote (events by outcome, signals by mode, dedup skips); lag rises on the
    partitions of a child paused with SIGSTOP (the other child's monitor reads it) and
    /livez names the stuck process (bound 2 s here), both back after SIGCONT; both
    consumers are in the group; SIGTERM stops all."""
    name = "ops-" + uuid.uuid4().hex[:6]
    proc = _spawn(redis_server.url, keys, "--processes", "2", "--metrics-port", str(worker_port),
                  "--consumer-name", name, "--batch", "10", WM_SIGNALS_LIVENESS_S="2")
    try:
        await _ready(proc, worker_port)
        store = WorkingMemoryStore(redis, keys=keys)
        resources = _lanes(keys, 3)
        body = "".join(f"\n- fact {i}: something worth remembering" for i in range(12))
        texts = [f"# {t}{body}" for t in "aabccd"]  # two exact repeats per lane
        for text in texts:
            for rid in resources:
                await store.replace(rid, text)
        await wait_caught_up(redis, keys)
        lanes = len(resources)

        async def counted() -> dict[str, float] | None:
            m = await _metrics(worker_port)
            return m if _sum(m, "wm_signals_events_total") == lanes * len(texts) else None
        m = await _until("every event counted", counted)
        assert m['wm_signals_events_total{outcome="signalled"}'] == lanes * 4
        assert m['wm_signals_events_total{outcome="deduplicated"}'] == lanes * 2
        assert m["wm_signals_dedup_skips_total"] == lanes * 2
        modes = {"snapshot": 0, "delta": 0}
        for p in range(keys.partitions):
            for lane in await redis.smembers(keys.lanes(p)):
                for _, sig in await read_signals(redis, keys, lane):
                    modes[sig.mode] += 1
        assert modes == {"snapshot": lanes, "delta": lanes * 3}  # one snapshot each, then small deltas
        for mode, count in modes.items():
            assert m[f'wm_signals_signals_emitted_total{{mode="{mode}"}}'] == count
        assert m["wm_signals_up"] == 1
        assert m["wm_signals_write_to_commit_seconds_count"] == lanes * len(texts)

        paused = _children(proc.pid)[1]  # one child: it reads the odd or the even partitions
        os.kill(paused, signal.SIGSTOP)
        try:
            for v in range(8):
                for rid in resources:
                    await store.replace(rid, f"# later {v}")

            async def lagging() -> bool:  # the paused child's partitions lag, the other's drain
                m = await _metrics(worker_port)
                lag = [m[f'wm_signals_stream_lag{{partition="{p}"}}'] for p in range(4)]
                pending = [m[f'wm_signals_stream_pending{{partition="{p}"}}'] for p in range(4)]
                return any(lag[p] + lag[p + 2] > 0 and lag[1 - p] == lag[3 - p] == pending[1 - p] == pending[3 - p] == 0
                           for p in (0, 1))
            await _until("lag on the paused child's partitions only", lagging)

            async def not_live() -> str | None:
                status, body = await _http(worker_port, "/livez")
                return body if status == 503 else None
            assert "no read loop progress" in await _until("/livez names the stuck process", not_live)

            async def down() -> bool:  # its last vector said up 1: a slot not published reads 0
                return (await _metrics(worker_port))["wm_signals_up"] == 0
            await _until("wm_signals_up 0 while a process is stuck", down)
        finally:
            os.kill(paused, signal.SIGCONT)
        await _until("/livez again", lambda: _status(worker_port, "/livez", 200))

        async def up() -> bool:
            return (await _metrics(worker_port))["wm_signals_up"] == 1
        await _until("wm_signals_up 1 again", up)

        async def drained() -> bool:
            m = await _metrics(worker_port)
            return (_sum(m, "wm_signals_stream_lag") == 0 and _sum(m, "wm_signals_stream_pending") == 0
                    and _sum(m, "wm_signals_events_total") == lanes * (len(texts) + 8))
        await _until("lag back to zero", drained)
        consumers = set()
        for stream in keys.all_writes():
            consumers |= {c["name"] for c in await redis.xinfo_consumers(stream, GROUP)}
        assert consumers == {f"{name}-0", f"{name}-1"}
        children = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(30)) == 0
        for pid in children:
            assert not _exists(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_readyz_follows_redis_and_check_follows_the_worker(tmp_path: Path, keys: Keys,
                                                                 worker_port: int) -> None:
    """/readyz is 503 while Redis is down and 200 again after it restarts (the reconnect
    is counted; /livez stays 200: restarting the worker would not help); ``worker --check``
    exits 0 while the worker lives and 1 once it is SIGKILLed (or was never there)."""
    server = RedisServer(data_dir=str(tmp_path)).start()
    name = "chk-" + uuid.uuid4().hex[:6]
    proc = _spawn(server.url, keys, "--metrics-port", str(worker_port), "--consumer-name", name)
    try:
        await _ready(proc, worker_port)
        assert await _http(worker_port, "/livez") == (200, "ok\n")
        assert _check(server.url, keys, name).returncode == 0
        never = _check(server.url, keys, "nobody")
        assert never.returncode == 1
        assert "no live worker 'nobody'" in never.stderr
        assert len(never.stderr.strip().splitlines()) == 1

        await anyio.to_thread.run_sync(server.kill)

        async def unready() -> str | None:
            status, body = await _http(worker_port, "/readyz")
            return body if status == 503 else None
        assert "Redis does not answer" in await _until("unready", unready)
        assert (await _http(worker_port, "/livez"))[0] == 200
        await anyio.to_thread.run_sync(server.start)
        await _ready(proc, worker_port)
        await _until("reconnect counted", lambda: _reconnected(worker_port))

        proc.kill()
        proc.wait()

        async def dead() -> bool:
            result = await anyio.to_thread.run_sync(_check, server.url, keys, name)
            return result.returncode == 1
        await _until("--check exits 1 for a dead worker", dead)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()


async def _status(port: int, path: str, status: int) -> bool:
    return (await _http(port, path))[0] == status


async def _reconnected(port: int) -> bool:
    return (await _metrics(port))["wm_signals_reconnects_total"] >= 1


async def test_a_child_that_dies_stops_the_supervisor_non_zero(redis_server: RedisServer, keys: Keys,
                                                               worker_port: int) -> None:
    """SIGKILL one child of ``--processes 2``: the supervisor stops the other and exits 1."""
    proc = _spawn(redis_server.url, keys, "--processes", "2", "--metrics-port", str(worker_port),
                  "--consumer-name", "die-" + uuid.uuid4().hex[:6])
    try:
        await _ready(proc, worker_port)
        victim, other = _children(proc.pid)
        os.kill(victim, signal.SIGKILL)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(30)) == 1
        assert not _exists(other)
        assert "worker.process_exited" in _log(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_monitor_and_check_run_under_the_generated_acl_users(tmp_path: Path) -> None:
    """The monitor's commands (readiness, gauges, script cache, heartbeat) are allowed to
    the worker user; ``worker --check``'s reads to the operator (probe) user."""
    keys = Keys("wm", 4)
    passwords = {role: f"{role}-pw" for role in ROLES}
    path = tmp_path / "users.acl"
    path.write_text(acl_file(keys, passwords))
    server = RedisServer(extra=["--aclfile", str(path)]).start()
    try:
        worker = connect(f"redis://wm-worker:worker-pw@127.0.0.1:{server.port}/0")
        operator = connect(f"redis://wm-operator:operator-pw@127.0.0.1:{server.port}/0")
        for stream in keys.all_writes():
            await worker.xgroup_create(stream, GROUP, id="0", mkstream=True)
        metrics = WorkerMetrics()
        board = Board(1, Layout(keys.partitions))
        monitor = Monitor(worker, keys, board=board, slot=0, interval_s=1, heartbeat_ttl_s=5, bound_s=30,
                          instance="host-a", metrics=metrics)
        await monitor.tick()
        assert monitor.ready == 0
        assert metrics.gauges_at > 0
        assert await check_heartbeat(operator, keys, "host-a") is None
        assert await check_heartbeat(worker, keys, "host-a") is None  # a probe with the worker's credentials
        await monitor.clear()
        assert "no live worker" in (await check_heartbeat(operator, keys, "host-a") or "")
        await worker.aclose()
        await operator.aclose()
    finally:
        server.stop()


@pytest.mark.parametrize("processes", [1, 2])
async def test_a_second_stop_signal_does_not_cut_the_graceful_stop(redis_server: RedisServer, keys: Keys,
                                                                   processes: int) -> None:
    """Ctrl-C signals the whole process group and the supervisor then sends each child
    SIGTERM: the watcher returned after the first signal, so the second killed the process
    mid-stop (exit 143 or 130, the consumer group not left, the heartbeat left to expire:
    ``worker --check`` kept saying healthy). Now the later signals are logged and ignored."""
    redis = connect(redis_server.url)
    name = "sig-" + uuid.uuid4().hex[:6]
    proc = spawn_worker(redis_server.url, keys, name, processes=processes)
    try:
        await wait_ready(proc)
        await WorkingMemoryStore(redis, keys=keys).replace("sig", "# Sig")
        await wait_caught_up(redis, keys)
        with anyio.fail_after(10):  # the monitor's first heartbeat
            while await check_heartbeat(redis, keys, name) is not None:
                await anyio.sleep(0.05)
        pids = [proc.pid, *_children(proc.pid)]  # signalled as Ctrl-C signals a process group
        # Redis holds every write for a while, so the stop (its last read, leaving the group)
        # is still under way at the second signal: a stop faster than the 50 ms between the
        # signals had exited already, and the second signal then met nothing to ignore
        await redis.execute_command("CLIENT", "PAUSE", 1500, "WRITE")
        for sig in (signal.SIGINT, signal.SIGTERM):
            for pid in pids:
                os.kill(pid, sig)
            await anyio.sleep(0.05)
        assert await anyio.to_thread.run_sync(lambda: proc.wait(30)) == 0
        log_text = await anyio.Path(proc.log_path).read_text()  # type: ignore[attr-defined]
        assert "worker.stop_signal_ignored" in log_text
        assert "worker.stopped" in log_text
        assert await check_heartbeat(redis, keys, name) is not None  # deleted at the stop: "no heartbeat"
        for stream in keys.all_writes():
            assert not await redis.xinfo_consumers(stream, GROUP)  # every consumer left its group
    finally:
        await redis.execute_command("CLIENT", "UNPAUSE")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await redis.aclose()


async def test_readiness_fails_on_a_read_only_replica() -> None:
    """Every readiness check is a read, and a replica answers reads: /readyz said "ok"
    while the worker, pointed at a replica (a demoted master, a wrong URL), retried its
    refused commits (READONLY) forever. A replica is now "Redis refuses work for now"."""
    keys = Keys("wm" + uuid.uuid4().hex[:6], 4)
    primary, replica = RedisServer().start(), RedisServer().start()
    clients = [connect(primary.url), connect(replica.url)]
    try:
        for stream in keys.all_writes():
            await clients[0].xgroup_create(stream, GROUP, id="0", mkstream=True)
        await clients[1].execute_command("REPLICAOF", "127.0.0.1", primary.port)
        with anyio.fail_after(20):  # the groups reach the replica with the first sync
            while (await clients[1].info("replication")).get("master_link_status") != "up" or \
                    not await clients[1].exists(keys.writes(0)):
                await anyio.sleep(0.05)
        monitor = Monitor(clients[1], keys, board=Board(1, Layout(keys.partitions)), slot=0, interval_s=1,
                          heartbeat_ttl_s=5, bound_s=30, instance="host-r", metrics=WorkerMetrics())
        assert await monitor._check() == 3
        # a namespace whose groups were never made (a worker started on the replica could not):
        # the cause is the replica, not the missing groups (it said "the consumer group is missing")
        other = Monitor(clients[1], Keys(keys.namespace + "x", 4), board=Board(1, Layout(4)), slot=0,
                        interval_s=1, heartbeat_ttl_s=5, bound_s=30, instance="host-r2", metrics=WorkerMetrics())
        assert await other._check() == 3
        await clients[1].execute_command("REPLICAOF", "NO", "ONE")  # promoted: ready again
        assert await monitor._check() == 0
    finally:
        for client in clients:
            await client.aclose()
        primary.stop()
        replica.stop()


async def test_a_child_refusing_its_settings_gives_its_reason_and_exit_2(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A partition count other than the namespace's is refused at start with exit 2 and the
    reason, by one process. Under ``--processes 2`` each child logged only "ExceptionGroup:
    unhandled errors in a TaskGroup" and the supervisor exited 1: a restart loop with no
    cause shown. Each child now says why, as one process does, and the supervisor exits 2."""
    await WorkingMemoryStore(redis, keys=keys).replace("alice", "# A")  # records the namespace's count
    wrong = str(keys.partitions * 2)
    proc = _spawn(redis_server.url, keys, "--processes", "2", "--partitions", wrong)
    code = await anyio.to_thread.run_sync(lambda: proc.wait(60))
    log = _log(proc)
    assert code == 2, log
    assert f"uses {keys.partitions} partitions" in log and "ExceptionGroup" not in log, log
