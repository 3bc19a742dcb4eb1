"""Compaction of idle lanes (workers.engine.compaction) against a real Redis.

An idle lane is compacted to one snapshot of its last version; a lane written again
continues from it; subscribers and agent loops that were away through a compaction resume
with a snapshot and never see a version twice; ``replay`` says where history starts.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import js_trim
from signals.core.signing import Signer
from signals.streams.keys import Keys
from signals.streams.replay import read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import check_lane, running_workers, wait_caught_up
from workers.engine.compaction import Compactor
from workers.engine.counters import METRICS
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).resolve().parents[2]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(12)]


def _doc(n: int) -> str:
    lines = list(LINES)
    lines[n % len(lines)] = f"- fact {n % len(lines)} changed at write {n}"
    return "# Notes\n" + "\n".join(lines) + f"\n- counter {n}"


def _compactor(redis: Redis, keys: Keys, **overrides: object) -> Compactor:
    options: dict[str, object] = {"idle_ms": 0, "batch": 10_000, "partitions": range(keys.partitions)}
    options.update(overrides)
    return Compactor(redis, keys, **options)  # type: ignore[arg-type]


async def _sweep(compactor: Compactor) -> None:
    """Passes until every partition was swept once (now + 1 s: every lane is idle)."""
    for _ in range(2 * len(compactor.partitions) + 1):
        await compactor.run_pass(round(time.time() * 1000) + 1000)


async def _write(url: str, redis: Redis, keys: Keys, texts: list[str], resource: str = "u", **worker: Any) -> None:
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, **worker):
        for text in texts:
            await store.replace(resource, text)
        await wait_caught_up(redis, keys)


@pytest.mark.parametrize("omit", [True, False])
@pytest.mark.parametrize("writes", [20, 23])  # ends at a snapshot (every 20th signal), or at a delta
async def test_an_idle_lane_keeps_one_snapshot_of_its_last_version(
    redis_server: RedisServer, redis: Redis, keys: Keys, omit: bool, writes: int
) -> None:
    """Compaction leaves one snapshot at the lane's last version, whose text is the
    document; the snapshot list names it, the tracking records where history starts."""
    await _write(redis_server.url, redis, keys, [_doc(n) for n in range(writes)], omit_delta_value=omit)
    lane = "r:u"
    before = await read_signals(redis, keys, lane)
    compactor = _compactor(redis, keys)
    counted = METRICS.counters["lanes_compacted"], METRICS.counters["compaction_entries_removed"]
    await _sweep(compactor)
    assert METRICS.counters["lanes_compacted"] == counted[0] + 1  # the metrics' counters (Prometheus)
    assert METRICS.counters["compaction_entries_removed"] == counted[1] + compactor.stats.removed
    after = await read_signals(redis, keys, lane)
    assert [(s.version, s.mode) for _, s in after] == [(before[-1][1].version, "snapshot")]
    assert after[0][1].value == js_trim(_doc(writes - 1))
    assert after[0][1].write_version == before[-1][1].write_version
    assert not await redis.exists(keys.snapshots(lane))  # the stream starts at its one snapshot: no hint needed
    tracking = await redis.hgetall(keys.track(lane))
    assert tracking["tail"] == after[0][0] == before[-1][0]  # the one snapshot has the tail's id
    assert tracking["mode"] == "snapshot" and tracking["n"] == "1"
    assert tracking["cv"] == str(before[-1][1].version)
    assert compactor.stats.compacted == 1 and compactor.stats.snapshots == int(before[-1][1].mode == "delta")
    assert compactor.stats.removed == len(before) - 1
    await _sweep(compactor)  # a compacted lane is left alone
    assert compactor.stats.compacted == 1
    assert await read_signals(redis, keys, lane) == after


async def test_a_lane_written_after_compaction_continues_from_its_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """New writes after a compaction are deltas on the compacted snapshot (versions go on
    from it, none repeated), and the chain rebuilds the document."""
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(7)])
    await _sweep(_compactor(redis, keys))
    await _write(url, redis, keys, [_doc(n) for n in range(7, 12)])
    signals = await check_lane(redis, keys, "r:u")
    assert [(s.version, s.mode) for s in signals] == [(7, "snapshot")] + [(v, "delta") for v in range(8, 13)]


async def test_a_worker_compacting_while_it_commits_keeps_every_lane_verifiable(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """The worker's own maintenance compacts (compact_after 0: every lane is idle at once)
    while writes go on: every lane stays verifiable, versions go on without a repeat, and
    no commit is disturbed by a compaction (the compacted snapshot takes the tail's id):
    the worker emits no snapshot beyond each lane's first and its snapshot_every ones."""
    url = redis_server.url
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, compact_after="0", retain_signals=30) as consumers:
        for n in range(30):
            for user in ("a", "b", "c"):
                await store.replace(user, _doc(n))
            await wait_caught_up(redis, keys)
            await anyio.sleep(0.05)  # maintenance passes (every 0.2 s) fall between the writes
    assert consumers[0].compactor.stats.compacted > 0
    for user in ("a", "b", "c"):
        signals = await check_lane(redis, keys, "r:" + user)
        assert signals[-1].version == 30
    stats = consumers[0].stats
    assert stats.signals == 90 and stats.snapshots <= 6 and stats.conflicts == 0


async def test_a_subscriber_offline_through_a_compaction_resumes_with_a_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A subscriber that stopped at version 3 resumes after the lane was compacted at
    version 9: it gets the snapshot of version 9 (the document), then the deltas after it;
    one that already held version 9 gets nothing twice."""
    url, lane = redis_server.url, "r:u"
    await _write(url, redis, keys, [_doc(n) for n in range(3)])
    behind = Subscription(redis, keys, lane)
    assert [m.signal.version for m in await behind.bootstrap()] == [1, 2, 3]
    await _write(url, redis, keys, [_doc(n) for n in range(3, 9)])
    current = Subscription(redis, keys, lane)
    await current.bootstrap()
    assert current.version == 9
    await _sweep(_compactor(redis, keys))
    resumed = await behind.catch_up()
    assert [(m.signal.version, m.signal.mode) for m in resumed] == [(9, "snapshot")]
    assert resumed[0].value == js_trim(_doc(8))
    assert await current.catch_up() == []
    await _write(url, redis, keys, [_doc(9)])
    for sub in (behind, current):
        items = await sub.catch_up()
        assert [(m.signal.version, m.signal.mode) for m in items] == [(10, "delta")]
        assert items[0].value == js_trim(_doc(9))


async def test_an_agent_offline_through_a_compaction_resumes_with_a_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """An agent loop whose process ended before a compaction: the next process (a new
    window) starts from the compacted snapshot; the model's rebuilt text is the document
    and the delivery log names each version once per window."""
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(5)])
    first = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    await first.start()
    result = await first.before_model_call([])
    assert [(a.mode, a.version) for a in result.add] == [("snapshot", 5)]
    await _write(url, redis, keys, [_doc(n) for n in range(5, 14)])
    await _sweep(_compactor(redis, keys))
    second = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    await second.start()
    result = await second.before_model_call([])
    assert [(a.mode, a.version, a.value) for a in result.add] == [("snapshot", 14, js_trim(_doc(13)))]
    held = [a.id for a in result.add]
    await _write(url, redis, keys, [_doc(14)])
    result = await second.before_model_call(held)
    assert [(a.mode, a.version) for a in result.add] == [("delta", 15)]
    assert result.add[0].value == js_trim(_doc(14))


async def test_replay_says_where_history_starts_after_a_compaction(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """replay's first line names the compaction and the version history starts at; --verify
    passes on the compacted history (from its snapshot) and says so too; once the lane is
    written again, the compacted snapshot is still where history starts."""
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(6)])
    await _sweep(_compactor(redis, keys))
    cli = [sys.executable, "-m", "workers", "replay", "--resource", "u", "--redis-url", url,
           "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
    note = ("history before version 6 was compacted (the lane was idle for compact_after, and the workers keep one "
            "snapshot of an idle lane); the oldest retained signal is that snapshot")
    text = await anyio.run_process(cli, cwd=ROOT)
    assert text.stdout.decode().splitlines()[0] == note
    verified = await anyio.run_process([*cli, "--verify"], cwd=ROOT)
    assert note in verified.stdout.decode()
    await _write(url, redis, keys, [_doc(n) for n in range(6, 9)])
    text = await anyio.run_process(cli, cwd=ROOT)
    lines = text.stdout.decode().splitlines()
    assert lines[0] == note and "v9" in text.stdout.decode()


async def test_a_signed_lane_is_compacted_to_a_signed_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """With signing on, the compacted snapshot carries the compacting worker's MAC (a
    subscriber that checks MACs takes it) and the tracking names its key; the lane's next
    signal is a delta on it."""
    key = "k" * 32
    signer = Signer(key.encode())
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(5)], signing_key=key)
    await _sweep(_compactor(redis, keys, signer=signer))
    tracking = await redis.hgetall(keys.track("r:u"))
    assert tracking["kid"] == signer.key_id and tracking["cv"] == "5"
    sub = Subscription(redis, keys, "r:u", signer=signer)
    items = await sub.bootstrap()
    assert [(m.signal.version, m.signal.mode) for m in items] == [(5, "snapshot")] and sub.refused == 0
    await _write(url, redis, keys, [_doc(5)], signing_key=key)
    items = await sub.catch_up()
    assert [(m.signal.version, m.signal.mode) for m in items] == [(6, "delta")] and sub.refused == 0
