"""Worker throughput (events/s) beside a minimal XREADGROUP -> XADD -> XACK loop and the
worker from before the trust-boundary validation, measured in the same run.

Workload: N writes on L lanes, ~1 KB Markdown documents, 1-3 changed lines per write,
20% exact repeats. The write events (chained as the write script chains them, with each
document) are pre-loaded (pipelined) into the partition streams of a fresh private
redis-server for every measurement, then timed:

- this tree's worker (``run_worker``: overlapped commits, maintenance, the worker
  command's collector settings) in a child process, until every event is processed;
- the pre-validation worker (commit :data:`PRE_VALIDATION`, the parent of "Worker trusts
  nothing it reads"), extracted with ``git archive`` and run the same way from its own
  tree (skipped, with the reason, when git or that commit is not available);
- the worker from before the slimmer signals and compaction (commit :data:`BEFORE_MEMORY`,
  issue 33: deltas carried their whole text, snapshots it twice), run the same way: the
  hot path must not slow down (target >= 0.95x);
- a minimal Python loop with no semantics over the same entries (read a batch, XADD each
  entry to one output stream, XACK);
- optionally ``redis-benchmark`` XADD with pipelining 16 (the server's raw append rate).

The host's load moves absolute rates a lot, so each round measures every contender back
to back and the ratios are taken per round (then the median over rounds): compare
ratios, not rates.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.cpu import server_cpu_s
from signals.core.codec import FIELD, encode_json
from signals.core.models import WriteEvent
from signals.streams.client import connect
from signals.streams.keys import Keys
from workers.engine.chains import CHAIN_IDS
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).resolve().parents[1]
#: The last commit before the worker validated what it reads (``git log``: the parent of
#: aaf01cf "Worker trusts nothing it reads"): what the validation's cost is measured against.
PRE_VALIDATION = "ae638ab6307c656a6294c804319f5bced191e0a5"
#: The last commit before the slimmer signals and compaction (issue 33): the memory work's
#: throughput baseline.
BEFORE_MEMORY = "9ea402b0974e462731104783baf4b11dbeaf8670"
_RESULT = "BENCH-RESULT "

#: Run in a child process with ``cwd`` = a source tree: that tree's worker drains the
#: backlog. Written for both layouts (``signals._util`` before the library's split).
_DRIVER = """
import json, sys, time
import anyio
try:
    from signals.streams.client import connect
except ImportError:
    from signals._util import connect
try:  # the layered tree, else the flat one of older commits (the pre-validation baseline)
    from workers.runtime import connect as runtime
    from workers.runtime.settings import Settings
    from workers.runtime.worker import run_worker
except ImportError:
    from workers import runtime
    from workers.settings import Settings
    from workers.supervisor import run_worker

async def server_cpu(redis):
    info = await redis.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]

async def main(url, namespace, partitions, writes):
    redis = connect(url)
    settings = Settings(redis_url=url, namespace=namespace, partitions=partitions, batch=1000)
    stop = anyio.Event()
    redis_cpu = await server_cpu(redis)
    cpu, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        consumer = await tg.start(lambda task_status: run_worker(
            redis, settings, name="bench", stop=stop, handle_signals=False, task_status=task_status))
        while consumer.stats.events < writes:
            await anyio.sleep(0.005)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        redis_cpu = await server_cpu(redis) - redis_cpu
        stop.set()
    await redis.aclose()
    s = consumer.stats
    print("BENCH-RESULT " + json.dumps({"eps": writes / elapsed, "cpu_us": (cpu + redis_cpu) / writes * 1e6,
                                        "signals": s.signals, "deltas": s.deltas,
                                        "snapshots": s.snapshots, "skipped": s.skipped}), flush=True)

runtime.tune_gc()
runtime.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
"""


def _documents(lanes: int, rng: random.Random) -> list[list[str]]:
    return [[f"- fact {i:02d}: {rng.choice(['likes', 'lives in', 'works on', 'plans'])} "
             f"{rng.randint(0, 10**9):010d} and more words" for i in range(22)] for _ in range(lanes)]


async def _load(url: str, keys: Keys, writes: int, lanes: int) -> None:
    rng = random.Random(1)
    redis = connect(url)
    docs = _documents(lanes, rng)
    versions = [0] * lanes
    last_event = [""] * lanes  # the chain the write script keeps: each event names the lane's previous one
    chains: list[list[str]] = [[] for _ in range(lanes)]  # and the document its last CHAIN_IDS ids
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
            chains[i] = [*chains[i][1 - CHAIN_IDS:], entry_id]  # as many as the script keeps of real ids
            pipe.hset(keys.doc(lane), mapping={"data": text, "version": versions[i], "format": "markdown",
                                               "eid": entry_id, "chain": " ".join(chains[i])})
            if n % 2000 == 1999:
                await pipe.execute()
        await pipe.execute()
    await redis.aclose()


@contextmanager
def _backlog(keys: Keys, writes: int, lanes: int) -> Iterator[RedisServer]:
    """A fresh private redis-server holding the benchmark's backlog."""
    with RedisServer() as server:
        runtime.run(_load, server.url, keys, writes, lanes)
        yield server


def _worker(tree: Path, url: str, keys: Keys, writes: int) -> dict[str, Any]:
    """The worker of the source tree ``tree`` (a child process) draining the backlog."""
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, url, keys.namespace, str(keys.partitions), str(writes)],
        cwd=tree, env=_child_env(tree), capture_output=True, text=True, timeout=900, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT):
            return dict(json.loads(line[len(_RESULT):]))
    raise RuntimeError(f"the worker of {tree} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")


def _child_env(tree: Path) -> dict[str, str]:
    """The environment without ``WM_SIGNALS_*`` settings, with ``tree`` first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_SIGNALS_")}
    env["PYTHONPATH"] = str(tree)
    return env


async def _minimal(url: str, keys: Keys, writes: int) -> dict[str, float]:
    redis = connect(url)
    streams = keys.all_writes()
    for stream in streams:
        await redis.xgroup_create(stream, "minimal", id="0")
    done = 0
    redis_cpu = await server_cpu_s(redis)
    cpu, start = time.process_time(), time.perf_counter()
    while done < writes:
        reply = await redis.xreadgroup("minimal", "m", dict.fromkeys(streams, ">"), count=1000, block=100)
        async with redis.pipeline(transaction=False) as pipe:
            for stream, entries in reply or []:
                for entry_id, fields in entries:
                    pipe.xadd("minimal:out", fields)
                    pipe.xack(stream, "minimal", entry_id)
                    done += 1
            await pipe.execute()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    redis_cpu = await server_cpu_s(redis) - redis_cpu
    await redis.aclose()
    return {"eps": writes / elapsed, "cpu_us": (cpu + redis_cpu) / writes * 1e6}


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


@contextmanager
def source_tree(commit: str, label: str) -> Iterator[tuple[Path | None, str]]:
    """The tree of ``commit``, extracted to a temporary directory, or ``None`` and why it
    cannot be (no git, a clone without that history)."""
    git = shutil.which("git")
    if git is None:
        yield None, "git is not installed"
        return
    with tempfile.TemporaryDirectory(prefix=f"wm-bench-{label}-") as tmp:
        archive = subprocess.run([git, "-C", str(ROOT), "archive", commit],
                                 capture_output=True, check=False, timeout=120)
        if archive.returncode != 0:
            reason = archive.stderr.decode(errors="replace").strip().splitlines()
            yield None, f"commit {commit[:7]} is not in this clone's history ({' '.join(reason)[:120]})"
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=120)
        yield Path(tmp), ""


def run(writes: int = 100_000, lanes: int = 1_000, rounds: int = 3) -> dict[str, Any]:
    """Measure every contender ``rounds`` times, each on a fresh server with the same
    backlog, back to back (the order turned round every other round, so that a drift
    of the host's load does not favour one); returns medians and the per-round ratios'
    medians, of events/s and of CPU (worker process plus Redis server) per event."""
    keys = Keys("bench", 16)
    runs: dict[str, list[dict[str, Any]]] = {"worker": [], "pre": [], "before": [], "minimal": []}
    raw = None
    with (source_tree(PRE_VALIDATION, "prevalidation") as (old_tree, skipped),
          source_tree(BEFORE_MEMORY, "before-memory") as (memory_tree, memory_skipped)):
        trees = {"pre": old_tree, "before": memory_tree, "worker": ROOT}
        contenders = ["minimal", *(name for name in ("pre", "before") if trees[name] is not None), "worker"]
        for n in range(rounds):
            for name in contenders if n % 2 == 0 else contenders[::-1]:
                with _backlog(keys, writes, lanes) as server:
                    tree = trees.get(name)
                    if tree is None:
                        runs[name].append(runtime.run(_minimal, server.url, keys, writes))
                    else:
                        runs[name].append(_worker(tree, server.url, keys, writes))
                    if name == "worker" and raw is None:
                        raw = _redis_benchmark(server.port, max(writes, 10_000))
    worker, pre, minimal, before = runs["worker"], runs["pre"], runs["minimal"], runs["before"]

    def ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float | None:
        return statistics.median(x[key] / y[key] for x, y in zip(a, b, strict=True)) if b else None

    def median(rows: list[dict[str, Any]], key: str) -> float | None:
        return statistics.median(r[key] for r in rows) if rows else None

    stats = worker[-1]
    return {"writes": writes, "lanes": lanes, "rounds": rounds,
            "worker_eps": median(worker, "eps"), "minimal_eps": median(minimal, "eps"),
            "pre_validation_eps": median(pre, "eps"), "ratio": ratio(worker, minimal, "eps"),
            "ratio_pre_validation": ratio(worker, pre, "eps"),
            "worker_cpu_us": median(worker, "cpu_us"), "pre_validation_cpu_us": median(pre, "cpu_us"),
            "minimal_cpu_us": median(minimal, "cpu_us"),
            # CPU per event, the pre-validation worker's over this one's: > 1 when this one costs less
            "cpu_ratio_pre_validation": ratio(pre, worker, "cpu_us"),
            "pre_validation_skipped": skipped, "pre_validation_commit": PRE_VALIDATION[:7],
            "before_memory_eps": median(before, "eps"), "ratio_before_memory": ratio(worker, before, "eps"),
            "before_memory_cpu_us": median(before, "cpu_us"),
            "cpu_ratio_before_memory": ratio(before, worker, "cpu_us"),
            "before_memory_skipped": memory_skipped, "before_memory_commit": BEFORE_MEMORY[:7],
            "per_round": [(w["eps"], p["eps"] if pre else None, m["eps"])
                          for w, p, m in zip(worker, pre or [{}] * rounds, minimal, strict=True)],
            "redis_benchmark_xadd_p16": raw, "signals": stats["signals"], "deltas": stats["deltas"],
            "snapshots": stats["snapshots"], "skipped": stats["skipped"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--lanes", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    r = run(args.writes, args.lanes, args.rounds)
    print(f"workload: {r['writes']} writes on {r['lanes']} lanes, ~1 KB docs, 20% repeats; "
          f"{r['rounds']} rounds, medians")
    print(f"signals: {r['signals']} ({r['deltas']} deltas, {r['snapshots']} snapshots), {r['skipped']} dedup skips")
    print(f"worker:        {r['worker_eps']:>10,.0f} events/s")
    if r["pre_validation_eps"] is not None:
        print(f"pre-validation worker ({r['pre_validation_commit']}): {r['pre_validation_eps']:>10,.0f} events/s   "
              f"worker/pre-validation = {r['ratio_pre_validation']:.2f}x")
        print(f"CPU per event (worker + Redis): {r['worker_cpu_us']:.1f} us, pre-validation "
              f"{r['pre_validation_cpu_us']:.1f} us (pre-validation/worker = {r['cpu_ratio_pre_validation']:.2f}x), "
              f"minimal loop {r['minimal_cpu_us']:.1f} us")
    else:
        print(f"pre-validation worker: skipped ({r['pre_validation_skipped']})")
    if r["before_memory_eps"] is not None:
        print(f"worker before issue 33 ({r['before_memory_commit']}): {r['before_memory_eps']:>10,.0f} events/s   "
              f"worker/before = {r['ratio_before_memory']:.2f}x (target >= 0.95x); CPU per event "
              f"{r['before_memory_cpu_us']:.1f} us (before/worker = {r['cpu_ratio_before_memory']:.2f}x)")
    else:
        print(f"worker before issue 33: skipped ({r['before_memory_skipped']})")
    print(f"minimal loop:  {r['minimal_eps']:>10,.0f} events/s   worker/minimal = {r['ratio']:.2f}x")
    for n, (worker, old, minimal) in enumerate(r["per_round"], 1):
        old_text = f"{old:,.0f} ({worker / old:.2f}x)" if old else "-"
        print(f"  round {n}: worker {worker:,.0f}, pre-validation {old_text}, minimal {minimal:,.0f} "
              f"({worker / minimal:.2f}x)")
    if r["redis_benchmark_xadd_p16"]:
        print(f"redis-benchmark XADD -P 16: {r['redis_benchmark_xadd_p16']:,.0f} requests/s "
              f"(worker = {r['worker_eps'] / r['redis_benchmark_xadd_p16']:.2f}x)")
    print("targets: worker >= 25,000 events/s, >= 0.7x the minimal loop, ~1.0x (>= 0.95x) the pre-validation worker")


if __name__ == "__main__":
    main()
