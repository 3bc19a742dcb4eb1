"""Redis memory per lane under the default retention, through the real pipeline.

Workload: U users, each with two lanes: a resource-scope Markdown profile (10-40 lines,
starting at 10-25 and growing, shrinking and changing a line or two per write) and a
thread-scope JSON plan (goal, status, 3-8 steps, notes; partial merges), each written
20-30 times through the write script (CAS, event chain: the store's own
script, keys and arguments, pipelined, texts from the store's replace and merge functions)
while a ``wm-signals worker`` process with default settings (compact policy,
``snapshot_every`` 20, ``retain_signals`` 30, deltas carrying their ``value``) signals
them. Once the worker has caught up and its maintenance has trimmed the write streams,
``MEMORY USAGE <key> SAMPLES 0`` (every element counted) is taken over every key of a
sample of lanes, by key kind, plus the partition-wide keys (write streams, document
index, lane registry) divided by the lanes; ``INFO memory`` ``used_memory`` before and
after is the cross-check (it also counts the allocator's overhead and Redis' dictionaries).

At 20-30 writes a lane holds its whole history (about as many signals as the retention).
A lane written for long holds about ``retain_signals + chain - 1`` signals on average
(``chain``: its mean signals per snapshot, at most ``snapshot_every``; see
:mod:`signals.core.retention`): the steady-state figure is the measured bytes per signal
times that count, a projection (labelled so), not a measurement.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from typing import Any

import anyio

from signals.core.memory import WorkingMemoryConfig, apply_merge, apply_replace
from signals.core.retention import DEFAULT_RETAIN_SIGNALS
from signals.streams.client import Client, connect, queue_script
from signals.streams.keys import GROUP, Keys
from signals.streams.store import LaneRef, WorkingMemoryStore
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer

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


def run(users: int = 5_000, sample: int = 500, seed: int = 7) -> dict[str, Any]:
    """Write ``users`` profiles and plans (2 lanes each) through a worker; measure memory."""
    with RedisServer() as server:
        keys = Keys("mem", 16)
        redis_before = runtime.run(_baseline, server.url)
        env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning"}
        env = {k: v for k, v in env.items() if not k.startswith("WM_SIGNALS_") or k == "WM_SIGNALS_LOG_LEVEL"}
        worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                   "--namespace", keys.namespace, "--partitions", str(keys.partitions)],
                                  env=env, stderr=subprocess.DEVNULL)
        try:
            started = time.perf_counter()
            writes = _write_in_processes(server.url, keys, users, seed, WRITERS)
            write_s = time.perf_counter() - started
            runtime.run(_caught_up, server.url, keys, 600.0)
            m = runtime.run(_measure, server.url, keys, users, sample, seed)
        finally:
            worker.terminate()
            worker.wait(30)
    lanes = 2 * users
    per_lane = {scope: sum(table.values()) for scope, table in m["per_kind"].items()}
    shared = sum(m["partition"].values())
    per_user = per_lane["profile"] + per_lane["plan"] + 2 * shared
    steady_user = per_user
    steady: dict[str, float] = {}
    for scope in ("profile", "plan"):
        held = m["signals"][scope]
        chain = min(SNAPSHOT_EVERY, held / max(m["snapshots"][scope], 1))  # the lane's mean chain length
        steady[scope] = DEFAULT_RETAIN_SIGNALS + chain - 1
        steady_user += m["per_kind"][scope]["sig"] / max(held, 1) * (steady[scope] - held)
    return {"users": users, "lanes": lanes, "writes": writes, "write_s": write_s, "sampled_users": m["sampled_users"],
            "per_kind": m["per_kind"], "signals": m["signals"], "snapshots": m["snapshots"], "text": m["text"],
            "partition": m["partition"],
            "per_lane": per_lane, "shared_per_lane": shared, "per_user": per_user,
            "used_delta_per_user": (m["used_after"] - redis_before) / users,
            "steady_signals": steady, "steady_per_user": steady_user}


async def _baseline(url: str) -> int:
    redis = connect(url)
    used = await _used_memory(redis)
    await redis.aclose()
    return used


def report(r: dict[str, Any]) -> list[str]:
    """The result as Markdown lines (``make bench`` and ``main``)."""
    kinds = ("doc", "trk", "sig", "snaps", "thread")
    out = ["| lane | text B | signals held (snapshots) | sig B per signal | " + " | ".join(kinds)
           + " | partition keys (share) | bytes per lane |",
           "|---|---:|---:|---:|" + "---:|" * len(kinds) + "---:|---:|"]
    for scope, name in (("profile", "Markdown profile (resource)"), ("plan", "JSON plan (thread)")):
        table = r["per_kind"][scope]
        cells = " | ".join(f"{table[k]:,.0f}" if k in table else "-" for k in kinds)
        per_signal = table["sig"] / max(r["signals"][scope], 1)
        out.append(f"| {name} | {r['text'][scope]:,.0f} | {r['signals'][scope]:.1f} ({r['snapshots'][scope]:.1f}) | "
                   f"{per_signal:,.0f} | {cells} | {r['shared_per_lane']:,.0f} | "
                   f"{r['per_lane'][scope] + r['shared_per_lane']:,.0f} |")
    per_user, used = r["per_user"], r["used_delta_per_user"]
    out += ["", f"Per user (one profile and one plan): {per_user:,.0f} B by MEMORY USAGE, {used:,.0f} B by "
            f"INFO used_memory (delta over the run / users; {used / per_user:.2f}x); "
            f"**per 1M users: {per_user * 1e6 / 2**30:.1f} GiB** ({used * 1e6 / 2**30:.1f} GiB by used_memory). "
            f"Steady state (a projection from the measured bytes per signal: a lane written long past its "
            f"retention of {DEFAULT_RETAIN_SIGNALS} holds about retain_signals + its mean chain length - 1 signals "
            f"on average, here {r['steady_signals']['profile']:.0f} for a profile and "
            f"{r['steady_signals']['plan']:.0f} for a plan): {r['steady_per_user']:,.0f} B per user, "
            f"{r['steady_per_user'] * 1e6 / 2**30:.1f} GiB per 1M users.",
            "", f"{r['users']:,} users ({r['lanes']:,} lanes), {r['writes']:,} writes in {r['write_s']:.0f} s through "
            f"the write script and one worker; MEMORY USAGE (SAMPLES 0) over every key of {r['sampled_users']:,} "
            "users' lanes; partition keys: write streams (trimmed), lane registry."]
    return out


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
