"""A seeded soak: several worker processes under chaos for a bounded time, against a real
redis-server (AOF, ``appendfsync always``) loaded with the generated ACL.

Marked ``soak``: outside the default run (``make soak`` runs it; ``WM_SOAK_SECONDS`` sets
the chaos phase's length, 45 s by default, ``WM_SOAK_SEED`` its seed). While writers
write through the writer role (each write acknowledged by the store is recorded), a
seeded schedule SIGKILLs and restarts worker processes, SIGSTOPs and resumes them,
destroys the consumer group or deletes a write stream, reloads the ACL file (every
client is disconnected), trims a write stream as the writer role (``XADD MAXLEN 0``),
flushes the functions, and restarts Redis. Then, with the chaos over:

- every acknowledged write version is signalled exactly once (each lane's signals carry
  distinct write versions, its last one the document's), and every lane passes the
  invariant check (it rebuilds its document);
- a final round of writes with the surviving workers: the outcomes their ``/metrics``
  count equal the events of that round, and the signals emitted equal the signals the
  lanes gained (the chaos phase's killed processes take their counts with them: its
  metrics are reported, and are at most what the streams hold).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio
import pytest
from redis.asyncio import Redis

from signals.errors import WmSignalsError
from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, wait_caught_up
from tests.ports import free_port

pytestmark = [
    pytest.mark.anyio, pytest.mark.redis, pytest.mark.soak, pytest.mark.timeout(900),
    # redis-py leaves a connection whose server was restarted under a command to the garbage
    # collector (its socket already closed by the server): a Redis restart is part of the soak
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
PASSWORDS = {role: f"{role}-{secrets.token_hex(4)}" for role in ROLES}
ADMIN = secrets.token_hex(8)
KEYS = Keys("soak", 4)
LANES = 60
WORKERS = 3


@dataclass
class Server:
    """A redis-server on a fixed port and directory, restartable with its data."""

    directory: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        acl = self.directory / "users.acl"
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--aclfile", str(acl)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            done = subprocess.run(["redis-cli", "-p", str(self.port), "--user", "admin", "--pass", ADMIN,
                                   "--no-auth-warning", "ping"], capture_output=True, text=True, check=False)
            if done.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def url(self, role: str) -> str:
        password = ADMIN if role == "admin" else PASSWORDS[role]
        user = "admin" if role == "admin" else f"soak-{role}"
        return f"redis://{user}:{password}@127.0.0.1:{self.port}/0"


@dataclass
class Worker:
    """One ``wm-signals worker`` process with its metrics port."""

    url: str
    metrics_port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    last_scrape: dict[str, float] = field(default_factory=dict)
    files: list[IO[bytes]] = field(default_factory=list)

    def start(self) -> None:
        self.last_scrape = {}  # a new process counts from 0
        self.files.append(self.log.open("ab"))
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workers", "worker", "--redis-url", self.url, "--namespace", KEYS.namespace,
             "--partitions", str(KEYS.partitions), "--metrics-port", str(self.metrics_port),
             "--metrics-addr", "127.0.0.1"],
            env={**env, "WM_SIGNALS_MAINTENANCE_INTERVAL_S": "0.3", "WM_SIGNALS_CLAIM_IDLE_MS": "1000",
                 "WM_SIGNALS_RECONNECT_TIMEOUT_S": "120", "WM_SIGNALS_RETAIN_SIGNALS": "100000"},
            stdout=subprocess.DEVNULL, stderr=self.files[-1])

    def scrape(self, attempts: int = 1) -> dict[str, float]:
        """The process's metrics (its last ones when it does not answer ``attempts`` times)."""
        for _ in range(attempts):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as reply:
                    text = reply.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        else:
            return self.last_scrape
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("wm_signals_") and " " in line:
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        self.last_scrape = out
        return out

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)
        finally:
            for f in self.files:
                f.close()


def _outcomes(scrape: dict[str, float]) -> tuple[float, float]:
    """(events counted by outcome but retried, signals emitted) of one scrape."""
    events = sum(v for k, v in scrape.items() if k.startswith("wm_signals_events_total{")
                 and 'outcome="retried"' not in k)
    emitted = sum(v for k, v in scrape.items() if k.startswith("wm_signals_signals_emitted_total{"))
    return events, emitted


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "users.acl").write_text(acl_file(KEYS, PASSWORDS) + f"user admin on >{ADMIN} ~* &* +@all\n")
    srv = Server(tmp_path, free_port())
    srv.start()
    yield srv
    srv.stop()


async def _admin(server: Server) -> Redis:
    return connect(server.url("admin"))  # type: ignore[return-value]


async def test_soak(server: Server) -> None:
    seed = int(os.environ.get("WM_SOAK_SEED", "30"))
    seconds = float(os.environ.get("WM_SOAK_SECONDS", "45"))
    rng = random.Random(seed)
    workers = [Worker(server.url("worker"), free_port(), server.directory / f"worker{n}.log") for n in range(WORKERS)]
    for w in workers:
        w.start()
    acknowledged: dict[str, int] = {}  # lane -> the last version a write returned
    admin = await _admin(server)
    try:
        with anyio.fail_after(30):  # the first worker loads the functions
            while not await admin.function_list():
                await anyio.sleep(0.1)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            for k in range(4):
                tg.start_soon(_writer, server, random.Random(seed * 100 + k), acknowledged, stop, k)
            await _chaos(server, workers, rng, seconds, admin)
            stop.set()
        for w in workers:  # everyone running again, and resumed
            if w.process is None or w.process.poll() is not None:
                w.start()
            w.signal(signal.SIGCONT)
        admin = await _reconnected(server, admin)
        with anyio.fail_after(180):
            await _until_signalled(admin, acknowledged)
        chaos_metrics = [_outcomes(w.scrape()) for w in workers]
        signals_before = {lane: await admin.xlen(KEYS.signals(lane)) for lane in acknowledged}
        for lane, last in acknowledged.items():
            signals = await check_lane(admin, KEYS, lane)
            versions = [s.write_version for s in signals]
            assert len(versions) == len(set(versions)), f"{lane}: a write version signalled twice"
            assert versions[-1] == int(await admin.hget(KEYS.doc(lane), "version") or 0) >= last, lane
        # the final round, chaos over: the metrics of the surviving workers count it exactly
        await wait_caught_up(admin, KEYS, limit_s=120)
        with anyio.fail_after(120):
            await _drained(admin)  # re-deliveries of recreated groups processed too
        await _metrics_settled(workers, [(0.0, 0.0)] * len(workers), 0)
        before = [_outcomes(w.scrape(attempts=20)) for w in workers]
        store = WorkingMemoryStore(connect(server.url("writer")), keys=KEYS)
        for lane in acknowledged:
            acknowledged[lane] = await store.replace(lane[2:], f"# {lane}\n- final round")
        await _until_signalled(admin, acknowledged)
        await wait_caught_up(admin, KEYS)
        events, emitted = await _metrics_settled(workers, before, len(acknowledged))
        gained = sum([await admin.xlen(KEYS.signals(lane)) - n for lane, n in signals_before.items()])
        assert events == len(acknowledged), (events, len(acknowledged))
        assert emitted == gained, (emitted, gained)
        total_signals = sum(signals_before.values())
        chaos_emitted = sum(m[1] for m in chaos_metrics)
        print(f"soak seed={seed} seconds={seconds:g}: {sum(acknowledged.values())} versions written over "
              f"{len(acknowledged)} lanes, {total_signals} signals before the final round (the surviving "
              f"processes' metrics count {chaos_emitted:g} of them); final round {events:g} events, "
              f"{emitted:g} signals, as the streams")
        assert chaos_emitted <= total_signals
        await store.redis.aclose()
    except BaseException:
        print(f"soak: the workers' logs are in {server.directory}")
        raise
    finally:
        for w in workers:
            w.stop()
        await admin.aclose()


async def _drained(admin: Redis) -> None:
    """Until every write stream's group has nothing pending and nothing unread."""
    while True:
        busy = []
        for p in range(KEYS.partitions):
            stream = KEYS.writes(p)
            if not await admin.exists(stream):
                continue
            for group in await admin.xinfo_groups(stream):
                if group["name"] != GROUP:
                    continue
                unread = await admin.xrange(stream, min="(" + group["last-delivered-id"], count=1)
                if group["pending"] or unread:  # (a trimmed stream's last id can be past its entries)
                    busy.append(stream)
        if not busy:
            return
        await anyio.sleep(0.2)


async def _metrics_settled(workers: list[Worker], before: list[tuple[float, float]],
                           expected: int) -> tuple[float, float]:
    """The final round's (events, signals emitted) over the workers' ``/metrics``, once
    they have published it (each process publishes its counts at its readiness tick) and
    stopped changing."""
    seen: tuple[float, float] | None = None
    with anyio.move_on_after(30):
        while True:
            after = [_outcomes(w.scrape(attempts=20)) for w in workers]
            now = (sum(a[0] - b[0] for a, b in zip(after, before, strict=True)),
                   sum(a[1] - b[1] for a, b in zip(after, before, strict=True)))
            if now[0] >= expected and now == seen:
                return now
            seen = now
            await anyio.sleep(2)
    return seen or (0.0, 0.0)


async def _writer(server: Server, rng: random.Random, acknowledged: dict[str, int], stop: anyio.Event,
                  k: int) -> None:
    store = WorkingMemoryStore(connect(server.url("writer")), keys=KEYS)
    try:
        while not stop.is_set():
            lane = f"r:u{rng.randrange(LANES)}"
            try:
                version = await store.replace(lane[2:], f"# {lane}\n- fact {rng.random():.6f} by {k}")
            except (WmSignalsError, OSError, ConnectionError) as e:  # Redis restarting, functions reloading
                del e
                await anyio.sleep(0.05)
                continue
            acknowledged[lane] = max(acknowledged.get(lane, 0), version)
            await anyio.sleep(rng.random() * 0.01)
    finally:
        await store.redis.aclose()


async def _chaos(server: Server, workers: list[Worker], rng: random.Random, seconds: float, admin: Redis) -> None:
    """The seeded schedule, one action every 0.3 to 1.5 s until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        await anyio.sleep(0.3 + rng.random() * 1.2)
        for w in workers:
            w.scrape()
        action = rng.choice(["kill", "kill", "pause", "group", "stream", "acl", "trim", "functions", "restart"])
        victim = rng.choice(workers)
        try:
            admin = await _act(action, server, victim, admin, rng)
        except (OSError, ConnectionError, WmSignalsError) as e:  # Redis restarting under the action
            del e
        for w in workers:
            if w.process is not None and w.process.poll() is not None:
                w.start()


async def _act(action: str, server: Server, victim: Worker, admin: Redis, rng: random.Random) -> Redis:
    if action == "kill":
        victim.signal(signal.SIGKILL)
        if victim.process is not None:
            victim.process.wait(10)
        victim.start()
    elif action == "pause":
        victim.signal(signal.SIGSTOP)
        await anyio.sleep(0.5 + rng.random() * 2)
        victim.signal(signal.SIGCONT)
    elif action == "group":
        await admin.xgroup_destroy(KEYS.writes(rng.randrange(KEYS.partitions)), GROUP)
    elif action == "stream":
        await admin.delete(KEYS.writes(rng.randrange(KEYS.partitions)))
    elif action == "acl":
        await admin.execute_command("ACL LOAD")  # type: ignore[no-untyped-call]
    elif action == "trim":
        writer = connect(server.url("writer"))
        try:
            await writer.xadd(KEYS.writes(rng.randrange(KEYS.partitions)), {"e": "x"}, maxlen=0, approximate=False)
        finally:
            await writer.aclose()
    elif action == "functions":
        await admin.function_flush()
    elif action == "restart":
        await admin.aclose()
        server.stop()
        server.start()
        return await _admin(server)
    return admin


async def _reconnected(server: Server, admin: Redis) -> Redis:
    try:
        await admin.ping()
    except (OSError, ConnectionError):
        await admin.aclose()
        return await _admin(server)
    return admin


async def _until_signalled(admin: Redis, acknowledged: dict[str, int]) -> None:
    """Until every lane's tracking has processed its document's version."""
    while True:
        behind = []
        for lane in acknowledged:
            doc = int(await admin.hget(KEYS.doc(lane), "version") or 0)
            if int(await admin.hget(KEYS.track(lane), "wv") or 0) < doc:
                behind.append(lane)
        if not behind:
            return
        await anyio.sleep(0.2)
