"""What the Lua scripts cost Redis in the steady state, beside plain commands doing the
least the same traffic needs, measured in the same run (a diagnostic: not part of
``make bench``; run it with ``python -m bench.bench_scripts``).

On a fresh private redis-server, L lanes each take one write per round (R rounds after a
warm-up that fills the document chains and the tracking cache), and a
:class:`~workers.engine.consumer.Consumer` processes each round in batches, as a worker does.
Writing and processing take turns, so ``INFO commandstats`` read around each phase
separates the two scripts (both sent as ``FCALL`` of the project's functions, ``EVALSHA``
on Redis 6.2, as the store and the worker send them). Printed, per write and per committed
lane, the microseconds of Redis CPU of:

- the write script, beside a plain ``XADD`` of the same event plus an ``HSET`` of the same
  document fields (what a write needs with no check, no chain, no index);
- the commit script, beside the minimal loop's ``XADD`` of the same signal text plus its
  ``XACK`` (what a commit needs with no check and no tracking).

Commandstats count the execution of each command (a script's with every command it
calls), not the reading of requests or the writing of replies: the ratios are what the
scripts add inside Redis. All scripts share one Lua collector, which runs in steps after
scripts: garbage the commit script leaves is partly collected during writes (the write
script alone, with no commits between, measured ~10 us per write here), so the split
between the two rows is approximate and their sum is not. The worker's own CPU per lane
is printed too. The latency benchmark's gap to its floor at 10,000 writes/s is mostly the
commit script's extra Redis time on a host shared with the load generator (see
docs/performance.md): this is where it shows in isolation.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from bench.bench_latency import BODY
from signals.core.codec import FIELD
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from signals.streams.scripts import ensure_loaded, server_mode
from signals.streams.store import WorkingMemoryStore
from workers.engine.consumer import Consumer
from workers.engine.options import ConsumerOptions
from workers.runtime.embedded import RedisServer

WARMUP_ROUNDS = 70  # past the chain's first block (64 ids): the steady state of a long-lived lane


async def _usec(redis: Client, command: str) -> tuple[int, int]:
    stats: dict[str, Any] = await redis.info("commandstats")
    entry = stats.get(f"cmdstat_{command}", {})
    return int(entry.get("usec", 0)), int(entry.get("calls", 0))


async def _measure(url: str, lanes: int, rounds: int, batch: int) -> dict[str, float]:
    keys = Keys("sc", 16)
    redis = connect(url)
    store = WorkingMemoryStore(redis, keys=keys)
    await store._check_namespace()
    consumer = Consumer(redis, keys, ConsumerOptions(batch=batch, block_ms=1), "bench")  # drained: no wait
    await consumer.ensure_groups()
    refs = [store.ref(f"user{i}") for i in range(lanes)]
    versions = [0] * lanes
    await ensure_loaded(redis)  # the project's functions (scripts on 6.2), as a worker loads them
    called = "fcall" if await server_mode(redis) == "function" else "evalsha"
    write = store.write_script.script

    async def write_round(k: int) -> None:
        async with redis.pipeline(transaction=False) as pipe:
            for i, ref in enumerate(refs):
                script_keys = store.write_script.keys_for(ref, "", None)
                args = store.write_script.args(ref, versions[i], f"# Profile\n{BODY}\n- round: {k}",
                                          op="replace", owner="", idempotency_key=None)
                pipe.execute_command(*await write.command(script_keys, args))
                versions[i] += 1
            await pipe.execute()

    async def drain() -> None:
        while raw := await consumer.read_batch():
            await consumer.process(raw)

    for k in range(WARMUP_ROUNDS):
        await write_round(k)
        await drain()
    cpu, writes, commits = 0.0, [0, 0], [0, 0]  # usec and calls of the scripts (FCALL), per phase
    for k in range(WARMUP_ROUNDS, WARMUP_ROUNDS + rounds):
        for phase, step in ((writes, write_round(k)), (commits, drain())):
            before, started = await _usec(redis, called), time.process_time()
            await step
            if phase is commits:
                cpu += time.process_time() - started
            after = await _usec(redis, called)
            phase[0] += after[0] - before[0]
            phase[1] += after[1] - before[1]
    lanes_committed = lanes * rounds
    out = {"write_us": writes[0] / writes[1], "commit_us": commits[0] / lanes_committed,
           "lanes_per_call": lanes_committed / commits[1], "worker_us": cpu / lanes_committed * 1e6}
    out.update(await _plain(redis, keys, lanes, rounds))
    await redis.aclose()
    return out


async def _plain(redis: Client, keys: Keys, lanes: int, rounds: int) -> dict[str, float]:
    """The plain commands for the same traffic: per write an XADD of the last write event
    and an HSET of its document's fields; per lane an XADD of its last signal's text and
    an XACK (of an id the group does not hold: the same work on the server)."""
    event_stream, signal_stream, doc = "sc:plain:writes", "sc:plain:sig", "sc:plain:doc"
    sample = keys.writes(keys.partition("r:user0"))
    [(_, event)] = await redis.xrevrange(sample, count=1)
    [(_, signal)] = await redis.xrevrange(keys.signals("r:user0"), count=1)
    fields = {"data": f"# Profile\n{BODY}\n- round: 0", "version": "1", "format": "markdown",
              "scope": "resource", "updatedAt": "2026-12-01T00:00:00Z", "eid": "1-1"}
    await redis.xgroup_create(event_stream, "g", id="$", mkstream=True)
    xadd_before, hset_before, xack_before = (await _usec(redis, "xadd"), await _usec(redis, "hset"),
                                             await _usec(redis, "xack"))
    for _ in range(rounds):
        async with redis.pipeline(transaction=False) as pipe:
            for _ in range(lanes):
                pipe.xadd(event_stream, event, maxlen=1000)
                pipe.hset(doc, mapping=fields)
            await pipe.execute()
    xadd_mid, hset_after = await _usec(redis, "xadd"), await _usec(redis, "hset")
    for _ in range(rounds):
        async with redis.pipeline(transaction=False) as pipe:
            for _ in range(lanes):
                pipe.xadd(signal_stream, {FIELD: signal[FIELD]}, maxlen=1000)
                pipe.xack(event_stream, "g", "1-1")
            await pipe.execute()
    xadd_after, xack_after = await _usec(redis, "xadd"), await _usec(redis, "xack")
    n = lanes * rounds
    return {"plain_write_us": ((xadd_mid[0] - xadd_before[0]) + (hset_after[0] - hset_before[0])) / n,
            "plain_commit_us": ((xadd_after[0] - xadd_mid[0]) + (xack_after[0] - xack_before[0])) / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lanes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=30, help="the worker's read count per stream")
    args = parser.parse_args()
    with RedisServer() as server:
        r = anyio.run(_measure, server.url, args.lanes, args.rounds, args.batch)
    print(f"{args.lanes} lanes x {args.rounds} rounds (after {WARMUP_ROUNDS} warm-up rounds), "
          f"{r['lanes_per_call']:.1f} lanes per commit call")
    print("| Redis CPU us | script | plain commands | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| per write (write script vs XADD + HSET) | {r['write_us']:.2f} | {r['plain_write_us']:.2f} | "
          f"{r['write_us'] / r['plain_write_us']:.1f}x |")
    print(f"| per committed lane (commit script vs XADD + XACK) | {r['commit_us']:.2f} | "
          f"{r['plain_commit_us']:.2f} | {r['commit_us'] / r['plain_commit_us']:.1f}x |")
    print(f"worker CPU per committed lane (read, plan, commit, settle): {r['worker_us']:.1f} us")


if __name__ == "__main__":
    main()
