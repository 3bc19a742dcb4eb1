"""Worker throughput (events/s) beside a minimal XREADGROUP -> XADD -> XACK loop.

Workload: N writes on L lanes, ~1 KB Markdown documents, 1-3 changed lines per write,
20% exact repeats. The write events are pre-loaded (pipelined) into the partition streams
of a private redis-server, then timed: (a) one wm-signals worker draining them (dedup,
diff, atomic commit), (b) a minimal Python loop with no semantics over the same entries
(read a batch, XADD each entry to one output stream, XACK), (c) optionally
``redis-benchmark`` XADD with pipelining 16 (the server's raw append rate).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import time
from typing import Any

import anyio

from signals.core.codec import FIELD, encode_json
from signals.core.models import WriteEvent
from signals.streams.client import connect
from signals.streams.keys import Keys
from workers import runtime
from workers.embedded import RedisServer
from workers.settings import Settings
from workers.supervisor import run_worker


def _documents(lanes: int, rng: random.Random) -> list[list[str]]:
    return [[f"- fact {i:02d}: {rng.choice(['likes', 'lives in', 'works on', 'plans'])} "
             f"{rng.randint(0, 10**9):010d} and more words" for i in range(22)] for _ in range(lanes)]


async def _load(url: str, keys: Keys, writes: int, lanes: int) -> None:
    rng = random.Random(1)
    redis = connect(url)
    docs = _documents(lanes, rng)
    versions = [0] * lanes
    last_event = [""] * lanes  # the chain the write script keeps: each event names the lane's previous one
    sequence = [0] * keys.partitions
    async with redis.pipeline(transaction=False) as pipe:
        for n in range(writes):
            i = rng.randrange(lanes)
            if rng.random() >= 0.2 or versions[i] == 0:
                for _ in range(rng.randint(1, 3)):
                    docs[i][rng.randrange(len(docs[i]))] = f"- fact changed {rng.randint(0, 10**9)}"
            versions[i] += 1
            lane = f"r:user{i}"
            text = "# Profile\n" + "\n".join(docs[i])
            event = WriteEvent(lane=lane, scope="resource", format="markdown", version=versions[i],
                               data=text, op="replace", resource_id=f"user{i}")
            partition = keys.partition(lane)
            sequence[partition] += 1
            entry_id = f"1-{sequence[partition]}"
            pipe.xadd(keys.writes(partition), {FIELD: encode_json(event), "p": last_event[i]}, id=entry_id)
            last_event[i] = entry_id
            pipe.hset(keys.doc(lane), mapping={"data": text, "version": versions[i], "format": "markdown",
                                               "eid": entry_id})
            pipe.hset(keys.documents(partition), lane, f"{versions[i]} {entry_id} markdown")
            if n % 2000 == 1999:
                await pipe.execute()
        await pipe.execute()
    await redis.aclose()


async def _worker(url: str, keys: Keys, writes: int) -> tuple[float, Any]:
    """The real worker (run_worker: overlapped commits, maintenance) until every write is done."""
    redis = connect(url)
    settings = Settings(redis_url=url, namespace=keys.namespace, partitions=keys.partitions, batch=1000)
    stop = anyio.Event()
    start = time.perf_counter()
    elapsed = 0.0
    async with anyio.create_task_group() as tg:
        consumer = await tg.start(lambda task_status: run_worker(
            redis, settings, name="bench", stop=stop, handle_signals=False, task_status=task_status))
        while consumer.stats.events < writes:
            await anyio.sleep(0.005)
        elapsed = time.perf_counter() - start
        stop.set()
    await redis.aclose()
    return writes / elapsed, consumer.stats


async def _minimal(url: str, keys: Keys, writes: int) -> float:
    redis = connect(url)
    streams = keys.all_writes()
    for stream in streams:
        await redis.xgroup_create(stream, "minimal", id="0")
    done = 0
    start = time.perf_counter()
    while done < writes:
        reply = await redis.xreadgroup("minimal", "m", dict.fromkeys(streams, ">"), count=1000, block=100)
        async with redis.pipeline(transaction=False) as pipe:
            for stream, entries in reply or []:
                for entry_id, fields in entries:
                    pipe.xadd("minimal:out", fields)
                    pipe.xack(stream, "minimal", entry_id)
                    done += 1
            await pipe.execute()
    elapsed = time.perf_counter() - start
    await redis.aclose()
    return writes / elapsed


def _redis_benchmark(port: int, requests: int) -> float | None:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    out = subprocess.run([binary, "-p", str(port), "-n", str(requests), "-P", "16", "-q", "-d", "1000",
                          "xadd", "bench:raw", "*", "e", "__rand_int__"], capture_output=True, text=True,
                         check=False, timeout=120).stdout
    for token in out.replace("\r", "\n").split():
        try:
            return float(token)
        except ValueError:
            continue
    return None


def run(writes: int = 100_000, lanes: int = 1_000) -> dict[str, Any]:
    """Run all three measurements on a fresh private server; returns the figures."""
    with RedisServer() as server:
        keys = Keys("bench", 16)
        runtime.run(_load, server.url, keys, writes, lanes)
        minimal = runtime.run(_minimal, server.url, keys, writes)
        worker, stats = runtime.run(_worker, server.url, keys, writes)
        raw = _redis_benchmark(server.port, max(writes, 10_000))
    return {"writes": writes, "lanes": lanes, "worker_eps": worker, "minimal_eps": minimal,
            "ratio": worker / minimal, "redis_benchmark_xadd_p16": raw, "signals": stats.signals,
            "deltas": stats.deltas, "snapshots": stats.snapshots, "skipped": stats.skipped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--lanes", type=int, default=1_000)
    args = parser.parse_args()
    r = run(args.writes, args.lanes)
    print(f"workload: {r['writes']} writes on {r['lanes']} lanes, ~1 KB docs, 20% repeats")
    print(f"signals: {r['signals']} ({r['deltas']} deltas, {r['snapshots']} snapshots), {r['skipped']} dedup skips")
    print(f"worker:        {r['worker_eps']:>10,.0f} events/s")
    print(f"minimal loop:  {r['minimal_eps']:>10,.0f} events/s   worker/minimal = {r['ratio']:.2f}x")
    if r["redis_benchmark_xadd_p16"]:
        print(f"redis-benchmark XADD -P 16: {r['redis_benchmark_xadd_p16']:,.0f} requests/s "
              f"(worker = {r['worker_eps'] / r['redis_benchmark_xadd_p16']:.2f}x)")
    print("targets: worker >= 25,000 events/s and >= 0.7x the minimal loop")


if __name__ == "__main__":
    main()
