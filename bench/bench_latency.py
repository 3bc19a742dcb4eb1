"""Write -> subscriber-receive latency at fixed write rates (one worker, one Redis).

Three processes on loopback: writers (paced, open loop, stamping each document with the
send time), one ``wm-signals worker``, and a subscriber that tails every lane's signal
stream and computes receive time minus send time. Prints p50 / p99 / max per rate, and
the rate actually achieved (on a 2-core machine the writers, the worker, the subscriber
and Redis share the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import anyio

from signals._util import connect
from signals.codec import FIELD, decode_signal
from signals.keys import Keys
from workers.embedded import RedisServer

LANES = 200
BODY = "\n".join(f"- fact {i}: something the agent remembers about the user" for i in range(8))


async def _writer(url: str, namespace: str, rate: float, seconds: float, tasks: int, offset: int,
                  stride: int) -> None:
    """Paced writes; process ``offset`` of ``stride`` writes to lanes offset, offset+stride, ..."""
    from signals.store import WorkingMemoryStore  # noqa: PLC0415

    store = WorkingMemoryStore.from_url(url, keys=Keys(namespace, 16))
    start = time.monotonic()
    per_task = rate / tasks

    async def one(k: int) -> None:
        n = 0
        while True:
            due = start + n / per_task
            if due - start >= seconds:
                return
            delay = due - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            lane = (offset + stride * (k + n * tasks)) % LANES
            await store.replace(f"user{lane}", f"# Profile\n{BODY}\n- sent: {time.time_ns()}")
            n += 1

    async with anyio.create_task_group() as tg:
        for k in range(tasks):
            tg.start_soon(one, k)
    await store.aclose()


async def _subscribe(url: str, keys: Keys, expected: int, limit_s: float) -> tuple[list[float], float]:
    redis = connect(url)
    cursors = {keys.signals(f"r:user{i}"): "$" for i in range(LANES)}
    # start from the current end of every stream
    for stream in cursors:
        last = await redis.xrevrange(stream, count=1)
        cursors[stream] = last[0][0] if last else "0-0"
    latencies: list[float] = []
    first = last_seen = None
    deadline = time.monotonic() + limit_s
    while len(latencies) < expected and time.monotonic() < deadline:
        reply = await redis.xread(cursors, count=1000, block=200)
        now = time.time_ns()
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                cursors[stream] = entry_id
                signal = decode_signal(fields[FIELD])
                value = signal.value or ""
                sent = int(value.rsplit("- sent: ", 1)[1])
                latencies.append((now - sent) / 1e6)
                first = first or now
                last_seen = now
    await redis.aclose()
    span = (last_seen - first) / 1e9 if first and last_seen else 0.0
    return latencies, span


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(rates: tuple[int, ...] = (2_000, 10_000), seconds: float = 5.0) -> list[dict[str, float]]:
    """Measure each rate on a fresh server and worker."""
    rows = []
    for rate in rates:
        with RedisServer() as server:
            keys = Keys(f"lat{rate}", 16)
            env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning", "WM_SIGNALS_BLOCK_MS": "50"}
            worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                       "--namespace", keys.namespace, "--partitions", "16", "--batch", "200"],
                                      env=env, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            procs = 1  # more writer processes only add CPU contention on a 2-core machine (measured)
            writers = [subprocess.Popen([sys.executable, "-m", "bench.bench_latency", "--writer", server.url,
                                         keys.namespace, str(rate / procs), str(seconds), str(k), str(procs)])
                       for k in range(procs)]
            latencies, span = anyio.run(_subscribe, server.url, keys, int(rate * seconds), seconds + 30)
            for writer in writers:
                writer.wait(120)
            worker.terminate()
            worker.wait(30)
        rows.append({"rate": rate, "received": len(latencies), "achieved": len(latencies) / span if span else 0,
                     "p50": _percentile(latencies, 0.5), "p99": _percentile(latencies, 0.99),
                     "max": max(latencies)})
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        from workers.logging import configure_logging  # noqa: PLC0415

        configure_logging("json", "warning")
        url, namespace, rate, seconds = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
        offset, stride = int(sys.argv[6]), int(sys.argv[7])
        anyio.run(_writer, url, namespace, rate, seconds, max(1, int(rate // 250)), offset, stride)
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="2000,10000")
    args = parser.parse_args()
    rows = run(tuple(int(r) for r in args.rates.split(",")), args.seconds)
    print(f"{'rate/s':>7} {'achieved/s':>11} {'signals':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in rows:
        print(f"{r['rate']:>7} {r['achieved']:>11,.0f} {r['received']:>8} {r['p50']:>8.2f} {r['p99']:>8.2f} "
              f"{r['max']:>8.2f}")
    print("targets: p99 <= 5 ms at 2,000/s and <= 10 ms at 10,000/s")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
