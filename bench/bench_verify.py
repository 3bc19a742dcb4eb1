"""``wm-signals replay --verify`` on a lane with 100,000 signals.

The lane's history is produced with the worker's own numbering (``signals.core.lane.advance``,
compact policy, a snapshot every 20 signals, ~1 KB Markdown, 1-3 changed lines per
write) and appended to a private redis-server; then the real command is timed as a
subprocess, beside a baseline measured in the same run: reading the same entries with
XRANGE and nothing else. Target: under 10 s.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time

from signals.core.codec import FIELD, encode_json
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import WriteEvent
from signals.streams.client import connect
from signals.streams.keys import Keys
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer


async def _load(url: str, keys: Keys, count: int) -> None:
    rng = random.Random(3)
    lines = [f"- fact {i:02d}: {rng.randint(0, 10**9)} remembered about the user" for i in range(22)]
    redis = connect(url)
    tracking = LaneTracking()
    options = LaneOptions(policy="compact", snapshot_every=20)
    lane = "r:long"
    version = 0
    async with redis.pipeline(transaction=False) as pipe:
        while tracking.version < count:
            for _ in range(rng.randint(1, 3)):
                lines[rng.randrange(len(lines))] = f"- fact changed {rng.randint(0, 10**9)}"
            version += 1
            event = WriteEvent(lane=lane, scope="resource", format="markdown", version=version,
                               data="# Profile\n" + "\n".join(lines), op="replace", resource_id="long")
            tracking, signal = advance(tracking, event, options, now="2026-01-01T00:00:00.000Z")
            if signal is not None:
                pipe.xadd(keys.signals(lane), {FIELD: encode_json(signal)})
            if version % 2000 == 0:
                await pipe.execute()
        # the stored document the chain must end at (replay --verify checks it)
        pipe.hset(keys.doc(lane), mapping={"data": event.data, "version": version, "format": "markdown",
                                           "scope": "resource"})
        pipe.hset(keys.track(lane), mapping={"wv": version})
        await pipe.execute()
    await redis.aclose()


async def _baseline(url: str, keys: Keys) -> float:
    redis = connect(url)
    start = time.perf_counter()
    cursor, total = "-", 0
    while True:
        entries = await redis.xrange(keys.signals("r:long"), min=cursor, count=2000)
        total += len(entries)
        if len(entries) < 2000:
            break
        cursor = "(" + entries[-1][0]
    elapsed = time.perf_counter() - start
    await redis.aclose()
    return elapsed


def run(count: int = 100_000) -> dict[str, float]:
    """Build the lane, time the command and the baseline."""
    with RedisServer() as server:
        keys = Keys("verify", 16)
        runtime.run(_load, server.url, keys, count)
        baseline = runtime.run(_baseline, server.url, keys)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "workers", "replay", "--redis-url", server.url,
                               "--namespace", keys.namespace, "--partitions", "16", "--resource", "long",
                               "--verify"], capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"replay --verify failed: {proc.stderr}")
    return {"signals": count, "verify_s": elapsed, "xrange_s": baseline, "ratio": elapsed / baseline,
            "output": proc.stdout.strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--signals", type=int, default=100_000)
    args = parser.parse_args()
    r = run(args.signals)
    print(r["output"])
    print(f"replay --verify: {r['verify_s']:.2f} s for {r['signals']:,} signals "
          f"(XRANGE alone: {r['xrange_s']:.2f} s, ratio {r['ratio']:.1f}x); target < 10 s")


if __name__ == "__main__":
    main()
