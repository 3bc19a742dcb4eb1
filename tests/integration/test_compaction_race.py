"""Compaction racing writes, with worker processes SIGKILLed and restarted (a seeded stress).

Two worker processes compact every lane as soon as it is written (``compact_after`` 0:
the harshest race there is) while writers rewrite the lanes and subscribers tail them;
every ~0.7 s one worker is SIGKILLed and another started. Afterwards every lane is
verifiable (its retained history starts at a snapshot, versions go up by one, no write
version signalled twice, the text equals the document) and no subscriber was handed a
version twice or out of order, and each ends at its lane's document.
"""

from __future__ import annotations

import random
import signal
import subprocess

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.cachekey import js_trim
from signals.streams.keys import Keys
from signals.streams.replay import materialise, read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import check_lane, lanes_of, spawn_worker, wait_caught_up, wait_ready
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

LANES = 24
ROUNDS = 40
SEED = 33


def _text(rng: random.Random, lines: list[str]) -> str:
    roll = rng.random()
    if roll < 0.15:
        pass  # an unchanged document: deduplicated
    elif roll < 0.6:
        lines[rng.randrange(len(lines))] = f"- changed {rng.random():.6f}"
    elif roll < 0.85:
        lines.append(f"- added {rng.random():.6f}")
    elif len(lines) > 3:
        del lines[rng.randrange(len(lines))]
    return "# Notes\n" + "\n".join(lines)


async def test_compaction_racing_writes_and_worker_kills_keeps_every_lane_verifiable(
    redis_server: RedisServer, redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """See the module docstring."""
    monkeypatch.setenv("WM_SIGNALS_COMPACT_AFTER", "0")
    rng = random.Random(SEED)
    store = WorkingMemoryStore(redis, keys=keys)
    docs = {f"u{i}": [f"- fact {k}" for k in range(6)] for i in range(LANES)}
    watched = [f"u{i}" for i in range(0, LANES, 4)]
    seen: dict[str, list[int]] = {user: [] for user in watched}
    values: dict[str, str] = {}
    procs: list[subprocess.Popen[bytes]] = []
    spawned = 0
    checked = [0]
    logs: list[str] = []

    async def start_worker() -> None:
        nonlocal spawned
        spawned += 1
        proc = spawn_worker(redis_server.url, keys, f"w{spawned}", batch=20)
        procs.append(proc)
        await wait_ready(proc)

    async def tail(user: str, done: anyio.Event) -> None:
        sub = Subscription(redis, keys, "r:" + user)
        while not done.is_set():
            for item in await sub.catch_up(block_ms=50):
                seen[user].append(item.signal.version)
                values[user] = item.value

    async def checker(done: anyio.Event) -> None:
        """Every lane's retained history, read while everything runs: it starts at a
        snapshot, versions go up by one and each text rebuilds to its cacheKey."""
        while not done.is_set():
            for user in docs:
                history = await read_signals(redis, keys, "r:" + user)
                if history:
                    assert history[0][1].mode == "snapshot", user
                    list(materialise(history))  # raises on a gap, a repeat or a text that does not rebuild
                    checked[0] += 1
            await anyio.sleep(0.05)

    async def killer(done: anyio.Event) -> None:
        while not done.is_set():
            await anyio.sleep(0.7)
            victim = procs[rng.randrange(len(procs))]
            if victim.poll() is None:
                logs.append(victim.log_path)  # type: ignore[attr-defined]
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                procs.remove(victim)
                await start_worker()

    try:
        await start_worker()
        await start_worker()
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            for user in watched:
                tg.start_soon(tail, user, done)
            tg.start_soon(killer, done)
            tg.start_soon(checker, done)
            for _ in range(ROUNDS):
                for user, lines in docs.items():
                    await store.replace(user, _text(rng, lines))
                await anyio.sleep(0.02)
            await wait_caught_up(redis, keys, limit_s=120)
            await anyio.sleep(1.0)  # the maintenance compacts what the last writes left
            done.set()
    finally:
        for proc in procs:
            logs.append(proc.log_path)  # type: ignore[attr-defined]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert spawned > 2  # workers were killed mid-run
    assert checked[0] > LANES  # histories were checked while compactions raced the commits
    for path in logs:  # no lane needed repairing: compaction never left a tracking and its stream apart
        assert "worker.lane_repair" not in await anyio.Path(path).read_text(), path
    lanes = await lanes_of(redis, keys)
    assert len(lanes) == LANES
    compacted = 0
    for lane in lanes:
        await check_lane(redis, keys, lane)
        compacted += await redis.hget(keys.track(lane), "cv") is not None
    assert compacted > 0
    for user in watched:
        sub = Subscription(redis, keys, "r:" + user)  # what a late subscriber gets
        assert [m.signal.mode for m in await sub.bootstrap()][:1] == ["snapshot"]
        versions = seen[user]
        assert versions == sorted(set(versions)), f"{user}: a version delivered twice or out of order"
        assert values[user] == js_trim(str(await redis.hget(keys.doc("r:" + user), "data") or ""))
        assert versions[-1] == sub.version
