"""Worker throughput as an operator runs it: metrics on beside off, ``--processes 2`` beside 1.

Each run loads a backlog of N write events into a fresh namespace, creates the consumer
group at the streams' ends (nothing to deliver), starts ``wm-signals worker`` as a real
process (its own process group, so that a supervisor and its children stop together),
waits for its heartbeat (ready), then moves the group back to the start (``XGROUP SETID
0``: the whole backlog undelivered at once) and times until the group has nothing
undelivered and nothing pending (``XINFO GROUPS`` polled every 10 ms). Start-up is
not timed, and the worker is never paused (a SIGSTOP longer than redis-py's 5 s socket
timeout would time its connection out and time the reconnect). With metrics on, ``/metrics`` is scraped every
second during the run (Prometheus scrapes every 15-60 s: this is the pessimistic case).
Configurations alternate within each round and the median of the rounds is reported,
so a busy moment of the host hits all of them alike.

Workload: ~1 KB Markdown documents on L lanes, 1-3 changed lines per write, 20% exact
repeats, 16 partitions; the loader keeps the write script's invariants (document, each
event naming the lane's previous one).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import anyio

from bench.cpu import process_cpu_s
from signals.core.codec import FIELD, encode_json
from signals.core.models import WriteEvent
from signals.streams.client import Client, connect
from signals.streams.keys import GROUP, Keys
from workers.engine.commit import BatchStats
from workers.ops.metrics import WorkerMetrics
from workers.runtime.embedded import RedisServer, free_port

ROOT = Path(__file__).parents[1]
PARTITIONS = 16


async def _load(redis: Client, keys: Keys, writes: int, lanes: int) -> None:
    """Pipeline ``writes`` write events (and their documents) into the namespace's streams."""
    rng = random.Random(7)
    docs = [[f"- fact {i:02d}: {rng.randint(0, 10**9):010d} and more words to make a line" for i in range(20)]
            for _ in range(lanes)]
    versions, last = [0] * lanes, [""] * lanes
    ms = int(time.time() * 1000)
    seq = [0] * keys.partitions
    async with redis.pipeline(transaction=False) as pipe:
        for n in range(writes):
            i = rng.randrange(lanes)
            if versions[i] == 0 or rng.random() >= 0.2:
                for _ in range(rng.randint(1, 3)):
                    docs[i][rng.randrange(len(docs[i]))] = f"- fact changed {rng.randint(0, 10**9)}"
            versions[i] += 1
            lane, text = f"r:u{i}", "# Profile\n" + "\n".join(docs[i])
            partition = keys.partition(lane)
            seq[partition] += 1
            entry_id = f"{ms}-{seq[partition]}"
            event = WriteEvent(lane=lane, scope="resource", format="markdown", version=versions[i], data=text,
                               op="replace", resource_id=f"u{i}")
            pipe.xadd(keys.writes(partition), {FIELD: encode_json(event), "p": last[i]}, id=entry_id)
            last[i] = entry_id
            pipe.hset(keys.doc(lane), mapping={"data": text, "version": versions[i], "format": "markdown",
                                               "eid": entry_id})
            if n % 2000 == 1999:
                await pipe.execute()
        await pipe.execute()


async def _drained(redis: Client, keys: Keys, ends: dict[str, str]) -> bool:
    """Whether the group has delivered every stream up to its end (``ends``: each stream's
    last id, read before the run) and nothing is pending. Not by the group's lag, which
    Redis 6.2 does not count."""
    async with redis.pipeline(transaction=False) as pipe:
        for stream in keys.all_writes():
            pipe.xinfo_groups(stream)
        replies = await pipe.execute()
    for stream, groups in zip(keys.all_writes(), replies, strict=True):
        group = next((g for g in groups if g["name"] == GROUP), None)
        if group is None or group["pending"] or group["last-delivered-id"] != ends[stream]:
            return False
    return True


def _scrape(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            reply.read()


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The worker in its own process group (SIGSTOP/SIGCONT reach a supervisor's children too)."""
    return subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL)


async def _run(url: str, writes: int, lanes: int, *, metrics: bool, processes: int) -> tuple[float, float, float]:
    """One timed run in a fresh namespace; returns events/s, the workers' and Redis's CPU us per event."""
    keys = Keys("b" + uuid.uuid4().hex[:8], PARTITIONS)
    port = free_port()
    name = "bench-" + keys.namespace
    args = [sys.executable, "-m", "workers", "worker", "--redis-url", url, "--namespace", keys.namespace,
            "--partitions", str(PARTITIONS), "--batch", "1000", "--consumer-name", name,
            "--processes", str(processes)]
    if metrics:
        args += ["--metrics-port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WM_SIGNALS_LOG_LEVEL": "warning",
           "WM_SIGNALS_HEALTH_INTERVAL_S": "0.2", "WM_SIGNALS_BLOCK_MS": "10"}
    redis = connect(url)
    server_pid = int((await redis.info("server"))["process_id"])
    await _load(redis, keys, writes, lanes)
    for stream in keys.all_writes():
        await redis.xgroup_create(stream, GROUP, id="$")
    proc = _start(args, env)
    try:
        with anyio.fail_after(60):
            while not await redis.exists(keys.heartbeat(name)):
                assert proc.poll() is None, f"worker exited with {proc.returncode}"
                await anyio.sleep(0.05)
        stop = threading.Event()
        scraper = threading.Thread(target=_scrape, args=(port, stop), daemon=True) if metrics else None
        ends: dict[str, str] = {}
        for stream in keys.all_writes():
            last = await redis.xrevrange(stream, count=1)
            ends[stream] = str(last[0][0]) if last else "0-0"
        async with redis.pipeline(transaction=False) as pipe:
            for stream in keys.all_writes():
                pipe.xgroup_setid(stream, GROUP, "0")
            await pipe.execute()
        start, cpu, server_cpu = time.perf_counter(), process_cpu_s(proc.pid), process_cpu_s(server_pid)
        if scraper:
            scraper.start()
        with anyio.fail_after(600):
            while not await _drained(redis, keys, ends):
                await anyio.sleep(0.01)
        elapsed = time.perf_counter() - start
        cpu, server_cpu = process_cpu_s(proc.pid) - cpu, process_cpu_s(server_pid) - server_cpu
        stop.set()
        return writes / elapsed, cpu / writes * 1e6, server_cpu / writes * 1e6
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        await anyio.to_thread.run_sync(proc.wait)
        await redis.aclose()


class _Entry:
    __slots__ = ("entry_id",)

    def __init__(self, entry_id: str) -> None:
        self.entry_id = entry_id


def hook_cost_us(batch: int = 1000, repeat: int = 200) -> float:
    """Microseconds per event of the worker's metric hooks (a batch's stats, each committed
    entry's write-to-commit observation): what the worker pays with or without the endpoint."""
    metrics = WorkerMetrics(PARTITIONS)
    entries = [_Entry(f"{int(time.time() * 1000) - 5}-{i}") for i in range(batch)]
    stats = BatchStats(events=batch, signalled=batch, deltas=batch)
    start = time.process_time()  # CPU time: what the hooks take from the worker, whatever the host's load
    for _ in range(repeat):
        metrics.record_batch(stats, 0.01)
        metrics.committed(entries, time.time())  # type: ignore[arg-type]
    return (time.process_time() - start) / (batch * repeat) * 1e6


CONFIGS = {"off": {"metrics": False, "processes": 1}, "on": {"metrics": True, "processes": 1},
           "p2": {"metrics": True, "processes": 2}}


def run(writes: int = 60_000, lanes: int = 1_000, rounds: int = 3) -> dict[str, Any]:
    """Median events/s per configuration over ``rounds`` alternating rounds, and the ratios."""
    results: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    redis_cpu: list[float] = []
    with RedisServer() as server:
        for _ in range(rounds):
            for name, config in CONFIGS.items():
                eps, us, server_us = anyio.run(lambda c=config: _run(server.url, writes, lanes, **c))
                results[name].append(eps)
                cpu[name].append(us)
                redis_cpu.append(server_us)
    med = {name: statistics.median(values) for name, values in results.items()}
    cpu_us = {name: statistics.median(values) for name, values in cpu.items()}
    hooks = hook_cost_us()
    return {"hook_us": hooks, "hook_share": hooks / cpu_us["off"] if cpu_us["off"] else 0.0,
            "writes": writes, "lanes": lanes, "rounds": rounds, "off_eps": med["off"], "on_eps": med["on"],
            "p2_eps": med["p2"], "metrics_ratio": med["on"] / med["off"], "processes_ratio": med["p2"] / med["on"],
            "cpu_us": cpu_us, "redis_cpu_us": statistics.median(redis_cpu), "runs": results}


def table(r: dict[str, Any]) -> list[str]:
    """The result as BENCHMARKS.md lines."""
    return [
        f"## Worker throughput as deployed: metrics on/off, --processes 2/1 ({r['writes']:,} writes, "
        f"{r['lanes']:,} lanes, worker processes, median of {r['rounds']} alternating rounds)",
        "",
        "| worker | events/s | ratio | worker CPU us/event |",
        "|---|---:|---:|---:|",
        f"| 1 process, metrics off | {r['off_eps']:,.0f} | 1.00x | {r['cpu_us']['off']:.0f} |",
        f"| 1 process, --metrics-port (scraped every second) | {r['on_eps']:,.0f} | {r['metrics_ratio']:.2f}x off | "
        f"{r['cpu_us']['on']:.0f} |",
        f"| --processes 2, --metrics-port | {r['p2_eps']:,.0f} | {r['processes_ratio']:.2f}x 1 process | "
        f"{r['cpu_us']['p2']:.0f} |",
        "",
        "Worker CPU per event (user + system of the worker's processes while draining) tells cost from "
        "contention: when the host's other load leaves the worker less than its cores, the rates fall and "
        "the ratios with them, the CPU per event does not. Redis spent "
        f"{r['redis_cpu_us']:.0f} us of CPU per event (median over the runs): one worker process waits for "
        "it between batches, two overlap it, so the 2-process gain is bounded by the cores the host leaves "
        "free for both workers and Redis.",
        "",
        f"The metric hooks run with the endpoint off too; measured alone they cost {r['hook_us']:.2f} us per event, "
        f"{r['hook_share']:.1%} of the worker's CPU per event (metrics off, above). "
        "Targets: metrics on >= 0.97x off; 2 processes >= 1.25x 1 (Redis shares the same cores). Each process "
        "reads its own partitions (p mod N).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=60_000)
    parser.add_argument("--lanes", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("\n".join(table(run(args.writes, args.lanes, args.rounds))))


if __name__ == "__main__":
    main()
