"""Write -> subscriber-receive latency at fixed write rates (one worker, one Redis).

Three processes on loopback: writers (paced, open loop, stamping each document with the
send time), one ``wm-signals worker``, and a subscriber that tails every lane's signal
stream and computes receive time minus send time. Prints p50 / p99 / max per rate
(after a 0.5 s warm-up that is not measured), the rate actually achieved (on a 2-core
machine the writers, the worker, the subscriber and Redis share the cores) and how late
the load generator started its writes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from signals.core.codec import FIELD, decode_signal
from signals.streams.client import connect
from signals.streams.keys import Keys
from workers import runtime
from workers.embedded import RedisServer

LANES = 200
WARMUP_S = 0.5  # not measured: connections opening, first script loads, caches filling
BODY = "\n".join(f"- fact {i}: something the agent remembers about the user" for i in range(8))


async def _writer(url: str, namespace: str, rate: float, seconds: float, tasks: int, offset: int,
                  stride: int) -> list[float]:
    """Paced writes; process ``offset`` of ``stride`` writes to lanes offset, offset+stride, ...

    Returns each write's start lag (ms after its scheduled time). Latency is measured from
    the write call, so this lag (the load generator falling behind) is reported beside it
    rather than hidden in it or silently omitted."""
    from signals.streams.store import WorkingMemoryStore  # noqa: PLC0415

    store = WorkingMemoryStore.from_url(url, keys=Keys(namespace, 16))
    start = time.monotonic()
    per_task = rate / tasks
    lags: list[float] = []

    async def one(k: int) -> None:
        n = 0
        while True:
            due = start + n / per_task
            if due - start >= WARMUP_S + seconds:
                return
            delay = due - time.monotonic()
            if delay > 0:
                await anyio.sleep(delay)
            if due - start >= WARMUP_S:
                lags.append((time.monotonic() - due) * 1e3)
            lane = (offset + stride * (k + n * tasks)) % LANES
            await store.replace(f"user{lane}", f"# Profile\n{BODY}\n- sent: {time.time_ns()}")
            n += 1

    async with anyio.create_task_group() as tg:
        for k in range(tasks):
            tg.start_soon(one, k)
    await store.aclose()
    return lags


async def _subscribe(url: str, keys: Keys, expected: int, limit_s: float) -> tuple[list[float], float]:
    """Tail every lane's signal stream with one blocking XREAD over all of them.

    It stands in for one agent loop per lane. Its cost is the observer's: Redis scans every
    listed stream on each call (measured: about 120 us per call over 200 streams at
    10,000/s); splitting the lanes over several blocking readers measured no better.
    """
    redis = connect(url)
    cursors = {}
    for i in range(LANES):  # start from the current end of every stream
        stream = keys.signals(f"r:user{i}")
        last = await redis.xrevrange(stream, count=1)
        cursors[stream] = last[0][0] if last else "0-0"
    received: list[tuple[int, int]] = []  # (sent, received) in ns
    deadline = time.monotonic() + limit_s
    while len(received) < expected and time.monotonic() < deadline:
        reply = await redis.xread(cursors, count=1000, block=200)
        now = time.time_ns()
        for stream, entries in reply or []:
            for entry_id, fields in entries:
                cursors[stream] = entry_id
                value = decode_signal(fields[FIELD]).value or ""
                received.append((int(value.rsplit("- sent: ", 1)[1]), now))
    await redis.aclose()
    if not received:
        return [], 0.0
    measured_from = min(sent for sent, _ in received) + int(WARMUP_S * 1e9)
    measured = [(sent, got) for sent, got in received if sent >= measured_from]
    span = (max(got for _, got in measured) - min(got for _, got in measured)) / 1e9 if measured else 0.0
    return [(got - sent) / 1e6 for sent, got in measured], span


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(rates: tuple[int, ...] = (2_000, 10_000), seconds: float = 5.0) -> list[dict[str, float]]:
    """Measure each rate on a fresh server and worker."""
    rows = []
    for rate in rates:
        with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
            keys = Keys(f"lat{rate}", 16)
            env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning", "WM_SIGNALS_BLOCK_MS": "50"}
            worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                       "--namespace", keys.namespace, "--partitions", "16", "--batch", "200"],
                                      env=env, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
            procs = 1  # more writer processes only add CPU contention on a 2-core machine (measured)
            lag_files = [Path(tmp, f"lags-{k}.json") for k in range(procs)]
            writers = [subprocess.Popen([sys.executable, "-m", "bench.bench_latency", "--writer", server.url,
                                         keys.namespace, str(rate / procs), str(seconds), str(k), str(procs),
                                         str(lag_files[k])])
                       for k in range(procs)]
            latencies, span = runtime.run(_subscribe, server.url, keys, int(rate * (WARMUP_S + seconds)),
                                          WARMUP_S + seconds + 30)
            for writer in writers:
                writer.wait(120)
            lags = [lag for path in lag_files for lag in json.loads(path.read_text())]
            worker.terminate()
            worker.wait(30)
        rows.append({"rate": rate, "received": len(latencies), "achieved": len(latencies) / span if span else 0,
                     "p50": _percentile(latencies, 0.5), "p99": _percentile(latencies, 0.99),
                     "max": max(latencies), "lag_p99": _percentile(lags, 0.99)})
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        from workers.logging import configure_logging  # noqa: PLC0415

        configure_logging("json", "warning")
        runtime.tune_gc()  # the load generator runs with the worker's collector settings
        url, namespace, rate, seconds = sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
        offset, stride = int(sys.argv[6]), int(sys.argv[7])
        # one paced task per 1,000 writes/s: more concurrent calls in one process only queue
        # behind each other in its event loop (measured: 40 tasks at 10,000/s tripled p50)
        lags = runtime.run(_writer, url, namespace, rate, seconds, max(1, int(rate // 1000)), offset, stride)
        Path(sys.argv[8]).write_text(json.dumps([round(lag, 3) for lag in lags]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="2000,10000")
    args = parser.parse_args()
    rows = run(tuple(int(r) for r in args.rates.split(",")), args.seconds)
    print(f"{'rate/s':>7} {'achieved/s':>11} {'signals':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'writer lag p99':>15}")
    for r in rows:
        print(f"{r['rate']:>7} {r['achieved']:>11,.0f} {r['received']:>8} {r['p50']:>8.2f} {r['p99']:>8.2f} "
              f"{r['max']:>8.2f} {r['lag_p99']:>15.2f}")
    print("targets: p99 <= 5 ms at 2,000/s and <= 10 ms at 10,000/s")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
