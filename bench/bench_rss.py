"""Worker memory (RSS) after touching 1,000, 100,000 and 1,000,000 lanes.

Lane state (documents, tracking, signal streams) lives in Redis; a worker keeps only a
bounded cache of delta bases. A ``wm-signals worker`` process runs against a private
redis-server while write events for ever more distinct lanes (small Markdown documents)
are appended; after each checkpoint has been processed, the worker's VmRSS is read from
/proc. Baseline in the same run: the worker's RSS right after start-up.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio

from signals.core.codec import FIELD, encode_json
from signals.core.models import WriteEvent
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _append(url: str, keys: Keys, start: int, stop: int) -> None:
    redis = connect(url)
    async with redis.pipeline(transaction=False) as pipe:
        for i in range(start, stop):
            lane = f"r:u{i}"
            text = f"# Profile {i}\n- name: user {i}\n- likes: tea"
            event = WriteEvent(lane=lane, scope="resource", format="markdown", version=1, data=text,
                               op="replace", resource_id=f"u{i}")
            pipe.hset(keys.doc(lane), mapping={"data": text, "version": 1, "format": "markdown"})
            pipe.xadd(keys.writes(keys.partition(lane)), {FIELD: encode_json(event)})
            if i % 5000 == 4999:
                await pipe.execute()
        await pipe.execute()
    await redis.aclose()


async def _drained(url: str, keys: Keys) -> None:
    redis = connect(url)
    while True:
        done = True
        for stream in keys.all_writes():
            info = await redis.xinfo_stream(stream)
            groups = {g["name"]: g for g in await redis.xinfo_groups(stream)}
            group = groups.get(GROUP)
            pending = int((await redis.xpending(stream, GROUP))["pending"]) if group else 1
            if group is None or pending or group["last-delivered-id"] != info["last-generated-id"]:
                done = False
                break
        if done:
            break
        await anyio.sleep(0.5)
    await redis.aclose()


def run(checkpoints: tuple[int, ...] = (1_000, 100_000, 1_000_000)) -> list[dict[str, float]]:
    """RSS after each checkpoint (lanes touched)."""
    rows = []
    with RedisServer() as server:
        keys = Keys("rss", 16)
        env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning"}
        worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                   "--namespace", keys.namespace, "--partitions", "16"],
                                  env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)
            rows.append({"lanes": 0, "rss_mb": _rss_mb(worker.pid), "seconds": 0.0})
            done = 0
            for target in checkpoints:
                start = time.perf_counter()
                runtime.run(_append, server.url, keys, done, target)
                runtime.run(_drained, server.url, keys)
                done = target
                rows.append({"lanes": target, "rss_mb": _rss_mb(worker.pid), "seconds": time.perf_counter() - start})
        finally:
            worker.terminate()
            worker.wait(60)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-lanes", type=int, default=1_000_000)
    args = parser.parse_args()
    points = tuple(p for p in (1_000, 100_000, 1_000_000) if p <= args.max_lanes) or (args.max_lanes,)
    rows = run(points)
    for r in rows:
        print(f"{r['lanes']:>9,} lanes: worker RSS {r['rss_mb']:7.1f} MB  ({r['seconds']:.1f} s)")
    grow = rows[-1]["rss_mb"] - rows[1]["rss_mb"] if len(rows) > 2 else 0.0
    print(f"growth from {rows[1]['lanes']:,} to {rows[-1]['lanes']:,} lanes: {grow:.1f} MB (target < 100 MB)")


if __name__ == "__main__":
    main()
