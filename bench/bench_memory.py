"""Redis memory per lane, active and idle, through the real pipeline, beside the worker
from before the memory work (issue 33) in the same run.

Workload: U users, each with two lanes: a resource-scope Markdown profile (10-40 lines,
starting at 10-25 and growing, shrinking and changing a line or two per write) and a
thread-scope JSON plan (goal, status, 3-8 steps, notes; partial merges), each written
20-30 times through the write script (CAS, event chain: the store's own
script, keys and arguments, pipelined, texts from the store's replace and merge functions)
while a ``wm-signals worker`` process with default settings signals them. The workload runs
twice on fresh servers: with the worker of commit :data:`bench.bench_worker.BEFORE_MEMORY`
(the baseline: every signal carried its whole text, a snapshot twice; no compaction),
extracted with ``git archive``, and with this tree's worker; this tree's lanes are then all
compacted (the worker's own compaction, every lane taken as idle) and measured again.

Once the worker has caught up and its maintenance has trimmed the write streams,
``MEMORY USAGE <key> SAMPLES 0`` (every element counted) is taken over every key of a
sample of lanes, by key kind, plus the partition-wide keys (write streams, lane registry)
divided by the lanes; ``INFO memory`` ``used_memory`` before and after is the cross-check
(it also counts the allocator's overhead and Redis' dictionaries). The documents are also
measured under ``hash-max-listpack-value`` 4096 (deploy/redis.conf).

At 20-30 writes a lane holds its whole history (about as many signals as the retention).
A lane written for long holds about ``retain_signals + chain - 1`` signals on average
(``chain``: its mean signals per snapshot, at most ``snapshot_every``; see
:mod:`signals.core.retention`): the steady-state figure is the measured bytes per signal
times that count, a projection (labelled so), not a measurement. The population projected
per 1M users has :data:`ACTIVE_SHARE` of its users active (at steady state) and the rest
idle (compacted).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench.bench_worker import BEFORE_MEMORY, ROOT, source_tree
from bench.cpu import server_cpu_s
from bench.memory_report import ACTIVE_SHARE, LISTPACK_VALUE, report
from signals.core.memory import WorkingMemoryConfig, apply_merge, apply_replace
from signals.core.retention import DEFAULT_RETAIN_SIGNALS
from signals.streams.client import Client, connect, queue_script
from signals.streams.keys import GROUP, Keys
from signals.streams.scripts import ensure_loaded
from signals.streams.store import LaneRef, WorkingMemoryStore
from workers.engine.compaction import Compactor
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer

__all__ = ("main", "report", "run")

SNAPSHOT_EVERY = 20  # the worker's default
PIPELINE = 500  # write-script calls per round trip
WRITERS = 2  # writer processes
_WORDS = ("tea", "hiking", "jazz", "Kyoto", "Rust", "sailing", "espresso", "chess", "Lisbon", "the quarterly report",
          "a standing desk", "early meetings", "vegetarian food", "dark mode", "audiobooks", "the night train")
_KINDS = ("likes", "dislikes", "plans", "asked about", "is learning", "prefers", "mentioned", "works on")


def _line(rng: random.Random) -> str:
    return (f"- {rng.choice(_KINDS)} {rng.choice(_WORDS)} and {rng.choice(_WORDS)} "
            f"({rng.choice(('weekly', 'since May', 'at work', 'for the trip', 'lately'))})")


def profile_versions(user: int, writes: int, rng: random.Random) -> list[str]:
    """A Markdown profile's successive texts: 10-40 lines, one or two changed per write."""
    lines = [_line(rng) for _ in range(rng.randint(10, 25))]
    out = []
    for _ in range(writes):
        roll = rng.random()
        if roll < 0.3 and len(lines) < 40:
            lines.insert(rng.randrange(len(lines) + 1), _line(rng))
        elif roll < 0.4 and len(lines) > 10:
            del lines[rng.randrange(len(lines))]
        else:
            for _ in range(rng.randint(1, 2)):
                lines[rng.randrange(len(lines))] = _line(rng)
        out.append(f"# Profile of user {user}\n## About\n" + "\n".join(lines))
    return out


def plan_updates(writes: int, rng: random.Random) -> list[dict[str, Any]]:
    """A JSON plan's merges: the whole plan first, then partial updates (arrays replace whole)."""
    steps = [{"title": f"{rng.choice(_KINDS)} {rng.choice(_WORDS)}", "done": False} for _ in range(rng.randint(3, 8))]
    updates: list[dict[str, Any]] = [{"goal": f"plan the trip to {rng.choice(_WORDS)}", "status": "drafting",
                                      "steps": steps, "notes": _line(rng)[2:], "budget": {"max": 1000}}]
    for n in range(1, writes):
        roll = rng.random()
        if roll < 0.4:
            steps = [dict(s) for s in steps]
            steps[rng.randrange(len(steps))]["done"] = True
            updates.append({"steps": steps})
        elif roll < 0.6:
            steps = [*steps, {"title": f"{rng.choice(_KINDS)} {rng.choice(_WORDS)}", "done": False}][-8:]
            updates.append({"steps": steps})
        elif roll < 0.8:
            updates.append({"notes": _line(rng)[2:], "status": rng.choice(("drafting", "booked", "in progress"))})
        else:
            updates.append({"budget": {"max": 1000 + 50 * n, "spent": 40 * n}})
    return updates


async def _write_all(url: str, keys: Keys, users: int, seed: int, part: int = 0, parts: int = 1) -> int:
    """Users ``part``, ``part + parts``, ...: their profile and plan writes, round by round
    (each user's texts come from its own seeded generator, so the split changes nothing);
    returns the number of writes. A thread lane's first write records its owner, as the
    store's does."""
    md = WorkingMemoryStore(connect(url), keys=keys)
    js = WorkingMemoryStore(md.redis, keys=keys, config=WorkingMemoryConfig(scope="thread", schema={"type": "object"}))
    await md._check_namespace()
    await ensure_loaded(md.redis)  # the project's functions, as a worker or an operator loads them
    work: list[tuple[int, list[str], list[dict[str, Any]]]] = []
    for user in range(part, users, parts):
        rng = random.Random(seed * 1_000_003 + user)
        work.append((user, profile_versions(user, rng.randint(20, 30), rng), plan_updates(rng.randint(20, 30), rng)))
    count = sum(len(p) + len(j) for _, p, j in work)

    # Pipelined: each round's writes go as write-script calls (the store's own script, keys
    # and arguments, the texts computed by the store's pure functions), PIPELINE at a time.
    # Each lane appears once per round, so its versions are known here and nothing conflicts.
    versions: dict[str, int] = {}
    current: dict[str, str | None] = {}
    calls: list[tuple[WorkingMemoryStore, LaneRef, str, str, str]] = []
    for n in range(30):
        for user, texts, updates in work:
            if n < len(texts):
                ref = md.ref(f"user{user}")
                calls.append((md, ref, "", "replace", apply_replace(current.get(ref.lane), texts[n], md.config)))
                current[ref.lane] = calls[-1][4]
            if n < len(updates):
                ref = js.ref(f"user{user}", f"plan{user}")
                merged = apply_merge(current.get(ref.lane), updates[n], js.config)
                calls.append((js, ref, f"user{user}", "merge", merged))
                current[ref.lane] = calls[-1][4]
    for start in range(0, len(calls), PIPELINE):
        async with md.redis.pipeline(transaction=False) as pipe:
            for store, ref, owner, op, data in calls[start:start + PIPELINE]:
                version = versions.get(ref.lane, 0)
                args = store.write_script.args(ref, version, data, op=op, owner=owner,
                                          idempotency_key=None)
                await queue_script(pipe, store.write_script.script, store.write_script.keys_for(ref, owner, None), args)
                versions[ref.lane] = version + 1
            replies = await pipe.execute()
        refused = [r for r in replies if not (isinstance(r, list) and r and r[0] == "ok")]
        if refused:
            raise RuntimeError(f"write script refused {len(refused)} writes, e.g. {refused[0]!r}")
    await md.aclose()
    await js.aclose()
    return count


def _write_in_processes(url: str, keys: Keys, users: int, seed: int, parts: int) -> int:
    """The writes from ``parts`` processes (the merges and validation run in Python);
    returns how many."""
    procs = [subprocess.Popen([sys.executable, "-m", "bench.bench_memory", "--writer", url, keys.namespace,
                               str(keys.partitions), str(users), str(seed), str(k), str(parts)],
                              stdout=subprocess.PIPE, text=True) for k in range(parts)]
    total = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode:
            raise RuntimeError(f"a writer process failed (exit {proc.returncode})")
        total += int(out.strip())
    return total


async def _used_memory(redis: Client) -> int:
    info = await redis.info("memory")
    return int(info["used_memory"])


async def _caught_up(url: str, keys: Keys, limit_s: float) -> None:
    """Wait until the worker has processed every write and its maintenance (every 2 s) has
    trimmed the write streams as far as it does (their length then stops falling)."""
    redis = connect(url)
    deadline = time.monotonic() + limit_s
    lengths: list[int] = []
    while time.monotonic() < deadline:
        busy = 0
        for p in range(keys.partitions):
            for group in await redis.xinfo_groups(keys.writes(p)):
                if group["name"] == GROUP:
                    busy += int(group["pending"]) + int(group.get("lag") or 0)
        lengths.append(sum([await redis.xlen(keys.writes(p)) for p in range(keys.partitions)]))
        if not busy and (lengths[-1] == 0 or lengths[-7:] == [lengths[-1]] * 7):
            await redis.aclose()
            return
        await anyio.sleep(0.5)
    await redis.aclose()
    raise TimeoutError(f"the worker did not catch up within {limit_s:.0f} s")


async def _usage(redis: Client, names: list[str]) -> list[int]:
    async with redis.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.memory_usage(name, samples=0)
        return [int(v or 0) for v in await pipe.execute()]


async def _measure(url: str, keys: Keys, users: int, sample: int, seed: int) -> dict[str, Any]:
    redis = connect(url)
    rng = random.Random(seed + 1)
    chosen = sorted(rng.sample(range(users), min(sample, users)))
    per_kind: dict[str, dict[str, float]] = {}
    signals: dict[str, float] = {}
    snapshots: dict[str, float] = {}
    text: dict[str, float] = {}
    for scope, lane_of, extra in (("profile", lambda u: f"r:user{u}", None),
                                  ("plan", lambda u: f"t:plan{u}", "thread")):
        lanes = [lane_of(u) for u in chosen]
        kinds = {"doc": keys.doc, "trk": keys.track, "sig": keys.signals, "snaps": keys.snapshots}
        if extra:
            kinds["thread"] = lambda lane: keys.thread(lane[2:])
        table = {}
        for kind, key_of in kinds.items():
            table[kind] = sum(await _usage(redis, [key_of(lane) for lane in lanes])) / len(lanes)
        per_kind[scope] = table
        async with redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                pipe.xlen(keys.signals(lane))
                pipe.llen(keys.snapshots(lane))  # nothing was trimmed: every snapshot is listed
                pipe.hstrlen(keys.doc(lane), "data")
            counts = await pipe.execute()
        signals[scope] = sum(counts[0::3]) / len(lanes)
        snapshots[scope] = sum(counts[1::3]) / len(lanes)
        text[scope] = sum(counts[2::3]) / len(lanes)
    lanes_total = 2 * users
    shared = {"writes": keys.all_writes(), "lanes": [keys.lanes(p) for p in range(keys.partitions)]}
    partition = {kind: sum(await _usage(redis, names)) / lanes_total for kind, names in shared.items()}
    used = await _used_memory(redis)
    await redis.aclose()
    return {"per_kind": per_kind, "signals": signals, "snapshots": snapshots, "text": text, "partition": partition,
            "used_after": used,
            "sampled_users": len(chosen)}




def _scenario(users: int, sample: int, seed: int, tree: Path, *, compact: bool) -> dict[str, Any]:
    """One run of the workload with the worker of source tree ``tree`` (default settings);
    with ``compact``, every lane is then compacted (this tree's compaction, every lane
    taken as idle) and measured again."""
    with RedisServer() as server:
        keys = Keys("mem", 16)
        redis_before = runtime.run(_baseline, server.url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}
        env |= {"WM_SIGNALS_LOG_LEVEL": "warning", "PYTHONPATH": str(tree)}
        worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                   "--namespace", keys.namespace, "--partitions", str(keys.partitions)],
                                  env=env, cwd=tree, stderr=subprocess.DEVNULL)
        try:
            started = time.perf_counter()
            writes = _write_in_processes(server.url, keys, users, seed, WRITERS)
            write_s = time.perf_counter() - started
            runtime.run(_caught_up, server.url, keys, 600.0)
            active = runtime.run(_measure, server.url, keys, users, sample, seed)
        finally:
            worker.terminate()
            worker.wait(30)
        out = {"writes": writes, "write_s": write_s, "active": _lanes(active, users, redis_before)}
        if compact:
            out["compaction"] = runtime.run(_compact_all, server.url, keys, 2 * users)
            out["idle"] = _lanes(runtime.run(_measure, server.url, keys, users, sample, seed), users, redis_before)
            out["listpack_doc"] = runtime.run(_listpack_docs, server.url, keys, users, sample, seed)
    return out




async def _listpack_docs(url: str, keys: Keys, users: int, sample: int, seed: int) -> dict[str, float]:
    """Bytes per document hash of the sampled lanes under ``hash-max-listpack-value``
    :data:`LISTPACK_VALUE` (deploy/redis.conf): each document is loaded again from its dump
    (RESTORE encodes a hash as the server's settings say), then measured."""
    redis = connect(url)
    rng = random.Random(seed + 1)
    chosen = sorted(rng.sample(range(users), min(sample, users)))
    await redis.config_set("hash-max-listpack-value", LISTPACK_VALUE)
    out: dict[str, float] = {}
    for scope, lanes in (("profile", [f"r:user{u}" for u in chosen]), ("plan", [f"t:plan{u}" for u in chosen])):
        for lane in lanes:
            dump = await redis.dump(keys.doc(lane))
            if dump is not None:
                await redis.restore(keys.doc(lane), 0, dump, replace=True)
        out[scope] = sum(await _usage(redis, [keys.doc(lane) for lane in lanes])) / len(lanes)
    await redis.aclose()
    return out


async def _compact_all(url: str, keys: Keys, lanes: int) -> dict[str, float]:
    """Compact every lane (the worker's own compaction, passes of its default batch, every
    lane taken as idle); returns lanes per second and the Redis server's CPU per lane."""
    redis = connect(url)
    compactor = Compactor(redis, keys, idle_ms=0, batch=500, partitions=range(keys.partitions))
    cpu = await server_cpu_s(redis)
    started = time.perf_counter()
    while compactor.partitions_swept < keys.partitions:  # one whole sweep of the lane registry
        await compactor.run_pass(round(time.time() * 1000) + 1000)
    elapsed = time.perf_counter() - started
    cpu = await server_cpu_s(redis) - cpu
    await redis.aclose()
    done = compactor.stats.compacted
    return {"lanes": lanes, "compacted": done, "snapshots": compactor.stats.snapshots,
            "removed": compactor.stats.removed, "seconds": elapsed, "lanes_per_s": done / elapsed,
            "redis_cpu_us_per_lane": cpu / max(done, 1) * 1e6}


def _lanes(m: dict[str, Any], users: int, redis_before: int) -> dict[str, Any]:
    """Bytes per lane (measured and, for lanes written past their retention, projected),
    per user, and the cross-check by ``used_memory``."""
    per_lane = {scope: sum(table.values()) + sum(m["partition"].values()) for scope, table in m["per_kind"].items()}
    steady_lane: dict[str, float] = {}
    steady_signals: dict[str, float] = {}
    for scope in ("profile", "plan"):
        held = m["signals"][scope]
        chain = min(SNAPSHOT_EVERY, held / max(m["snapshots"][scope], 1))  # the lane's mean chain length
        steady_signals[scope] = max(held, DEFAULT_RETAIN_SIGNALS + chain - 1)
        per_signal = m["per_kind"][scope]["sig"] / max(held, 1)
        steady_lane[scope] = per_lane[scope] + per_signal * (steady_signals[scope] - held)
    return {**m, "per_lane": per_lane, "per_user": per_lane["profile"] + per_lane["plan"],
            "used_per_user": (m["used_after"] - redis_before) / users,
            "steady_signals": steady_signals, "steady_lane": steady_lane,
            "steady_user": steady_lane["profile"] + steady_lane["plan"]}


def run(users: int = 5_000, sample: int = 500, seed: int = 7) -> dict[str, Any]:
    """The workload with the worker from before issue 33 (the baseline, when its commit is
    in this clone) and with this tree's, compacted afterwards: bytes per active and idle
    lane, per user, and per 1M users of whom :data:`ACTIVE_SHARE` wrote in the last day."""
    out: dict[str, Any] = {"users": users, "lanes": 2 * users, "sampled_users": min(sample, users)}
    with source_tree(BEFORE_MEMORY, "before-memory-mem") as (tree, skipped):
        out["before"] = None if tree is None else _scenario(users, sample, seed, tree, compact=False)
        out["before_skipped"] = skipped
    out["now"] = _scenario(users, sample, seed, ROOT, compact=True)
    for name in ("before", "now"):
        r = out[name]
        if r is None:
            continue
        idle = r["idle"]["per_user"] if "idle" in r else r["active"]["steady_user"]  # no compaction: history stays
        r["per_million_gib"] = (ACTIVE_SHARE * r["active"]["steady_user"] + (1 - ACTIVE_SHARE) * idle) * 1e6 / 2**30
        # the same population with active lanes as measured (20-30 writes each), not projected to steady state
        r["per_million_measured_gib"] = (ACTIVE_SHARE * r["active"]["per_user"] + (1 - ACTIVE_SHARE) * idle) \
            * 1e6 / 2**30
    now = out["now"]
    saved = {scope: now["idle"]["per_kind"][scope]["doc"] - now["listpack_doc"][scope] for scope in ("profile", "plan")}
    now["listpack_idle_lane"] = {scope: now["idle"]["per_lane"][scope] - saved[scope] for scope in saved}
    now["listpack_active_lane"] = {scope: now["active"]["steady_lane"][scope] - saved[scope] for scope in saved}
    now["listpack_per_million_gib"] = (ACTIVE_SHARE * sum(now["listpack_active_lane"].values())
                                       + (1 - ACTIVE_SHARE) * sum(now["listpack_idle_lane"].values())) * 1e6 / 2**30
    return out


async def _baseline(url: str) -> int:
    redis = connect(url)
    used = await _used_memory(redis)
    await redis.aclose()
    return used


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        url, namespace, partitions, users, seed, part, parts = sys.argv[2:9]
        print(runtime.run(_write_all, url, Keys(namespace, int(partitions)), int(users), int(seed), int(part),
                          int(parts)))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=5_000, help="users (two lanes each)")
    parser.add_argument("--sample", type=int, default=500, help="users whose keys are measured")
    args = parser.parse_args()
    print("\n".join(report(run(args.users, args.sample))))


if __name__ == "__main__":
    main()
