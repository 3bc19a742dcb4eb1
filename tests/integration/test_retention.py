"""Retention in users' terms (issue 14): at least ``retain_signals`` signals per lane and,
with ``retain_age``, everything younger; trimmed only at snapshot boundaries, so a replay
from the oldest retained signal rebuilds (and verifies) every retained version. Nothing
in a lane's snapshot list is trusted: junk there never stops the worker nor cuts a chain.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.models import Signal
from signals.core.retention import DEFAULT_RETAIN_SIGNALS
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).resolve().parents[2]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(10)]


def _doc(n: int) -> str:
    return "# Notes\n" + "\n".join(LINES) + f"\n- counter {n}"


async def _write(url: str, redis: Redis, keys: Keys, texts: list[str], lane_id: str = "u", **worker: Any) -> None:
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, **worker):
        for text in texts:
            await store.replace(lane_id, text)
        await wait_caught_up(redis, keys)


def _snapshot_starts(signals: list[Signal]) -> list[int]:
    return [s.version for s in signals if s.mode == "snapshot"]


@pytest.mark.parametrize("retain", [1, 5, 9])
async def test_at_least_retain_signals_are_kept_and_the_stream_starts_at_a_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys, retain: int
) -> None:
    """30 writes in chains of 4: the stream keeps at least ``retain`` signals, starts at a
    snapshot, and is trimmed as far as that allows (no later snapshot leaves ``retain``);
    the retained chain rebuilds the document with every cacheKey matching."""
    await _write(redis_server.url, redis, keys, [_doc(n) for n in range(30)], snapshot_every=4, retain_signals=retain)
    signals = await check_lane(redis, keys, "r:u")  # starts at a snapshot, rebuilds, verifies
    last = signals[-1].version
    assert last == 30 and len(signals) >= retain
    later = [v for v in _snapshot_starts(signals)[1:] if last - v + 1 >= retain]
    assert not later, f"not trimmed at snapshot {later[-1]} though it leaves {retain} signals"
    ids = [entry_id for entry_id, _ in await redis.xrange(keys.signals("r:u"))]
    listed = await redis.lrange(keys.snapshots("r:u"), 0, -1)
    assert listed == [i for i, s in zip(ids, signals, strict=True) if s.mode == "snapshot"]


async def test_a_small_compact_profile_keeps_all_twelve_writes_by_default(
    redis_server: RedisServer, keys: Keys, redis: Redis
) -> None:
    """The issue's case: 12 writes of a 3-line profile under compact (nearly every change a
    snapshot) used to keep 9 signals; the default keeps all 12, and replay says nothing was trimmed."""
    texts = [f"# Profile\n- name: Ada\n- visits: {n}" for n in range(1, 13)]
    await _write(redis_server.url, redis, keys, texts, policy="compact", retain_signals=DEFAULT_RETAIN_SIGNALS)
    flags = ["--redis-url", redis_server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
    cli = [sys.executable, "-m", "workers", "replay", "--resource", "u", *flags]
    out = await anyio.run_process([*cli, "--json"], cwd=ROOT)
    records = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert [r["version"] for r in records] == list(range(1, 13))
    assert {r["firstRetainedVersion"] for r in records} == {1}
    text = await anyio.run_process(cli, cwd=ROOT)
    assert b"trimmed" not in text.stdout + text.stderr


async def test_retain_age_keeps_young_signals_and_lets_old_ones_go(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """With one signal to retain and snapshots only, an age of an hour keeps all ten; an age
    of 50 ms lets a batch written 300 ms before the next one go, except its last snapshot
    when the signals after it are younger than the age (the oldest retained signal is the
    newest snapshot at least that old: an age floor keeps at most one chain more)."""
    url = redis_server.url
    await _write(url, redis, keys, [f"# v{n}" for n in range(10)], lane_id="young",
                 snapshot_every=1, retain_signals=1, retain_age="1h")
    assert [s.version for s in await check_lane(redis, keys, "r:young")] == list(range(1, 11))
    await _write(url, redis, keys, [f"# v{n}" for n in range(5)], lane_id="old",
                 snapshot_every=1, retain_signals=1, retain_age="50ms")
    await anyio.sleep(0.3)
    await _write(url, redis, keys, [f"# w{n}" for n in range(5)], lane_id="old",
                 snapshot_every=1, retain_signals=1, retain_age="50ms")
    kept = [s.version for s in await check_lane(redis, keys, "r:old")]
    assert kept == list(range(kept[0], 11)) and kept[0] >= 5, kept


async def test_junk_in_the_snapshot_list_never_stops_the_worker_nor_cuts_a_chain(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A snapshot list holding junk (not ids, ids ahead of the stream, the id of a delta, an
    id the stream never had, huge versions) is restarted at the next snapshot: the worker
    keeps signalling, the stream still starts at a snapshot, and trimming resumes."""
    url, lane = redis_server.url, "r:u"
    await _write(url, redis, keys, [_doc(n) for n in range(6)], snapshot_every=3, retain_signals=3)
    ids = [(entry_id, json.loads(f["e"])["mode"]) for entry_id, f in await redis.xrange(keys.signals(lane))]
    delta_id = next(entry_id for entry_id, mode in ids if mode == "delta")
    junk = ["junk", "", "1-1", delta_id, "99999999999999-0", "18446744073709551615-18446744073709551615", "é" * 40]
    snaps = keys.snapshots(lane)
    for entry in junk:
        await redis.delete(snaps)
        await redis.rpush(snaps, entry, *(await redis.lrange(snaps, 0, -1)))
        start = (await check_lane(redis, keys, lane))[-1].version
        await _write(url, redis, keys, [_doc(100 + start + n) for n in range(7)], snapshot_every=3, retain_signals=3)
        signals = await check_lane(redis, keys, lane)  # starts at a snapshot; rebuilds; matches the document
        assert signals[-1].version == start + 7, entry
        assert len(signals) >= 3
    # a listed id whose entry is gone from the stream (deleted by someone) is junk as well
    forged = json.dumps({"id": "working-memory", "mode": "snapshot", "version": 2**53})
    forged_id = await redis.xadd(keys.signals(lane), {"e": forged})
    await redis.xdel(keys.signals(lane), forged_id)  # not in the stream, yet listed first
    await redis.lpush(snaps, forged_id)
    for round_ in range(2):  # the first round restarts the list, the second trims again
        await _write(url, redis, keys, [_doc(500 + 10 * round_ + n) for n in range(7)], snapshot_every=3,
                     retain_signals=3)
    signals = await check_lane(redis, keys, lane)
    assert 3 <= len(signals) <= 3 + 2 * 3 - 2, [s.version for s in signals]  # retain + 2 chains - 2 at most


def _cli(url: str, keys: Keys, *args: str) -> list[str]:
    return [sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions)]


async def test_replay_says_where_the_retained_history_begins_and_verifies_from_there(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A trimmed lane: replay's text output starts with the trimmed-history line, --json
    records carry firstRetainedVersion, and --verify (a replay from the oldest retained
    signal) passes and says so too."""
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(10)], snapshot_every=3, retain_signals=2)
    first = (await check_lane(redis, keys, "r:u"))[0].version
    assert first == 7  # snapshots at 1, 4, 7, 10: from 10 one signal, from 7 four
    env = {**os.environ, "WM_SIGNALS_RETAIN_SIGNALS": "2"}
    text = await anyio.run_process(_cli(url, keys, "replay", "--resource", "u"), cwd=ROOT, env=env)
    assert text.stdout.decode().splitlines()[0] == (
        "history before signal version 7 was trimmed (retention: at least 2 signals per lane, trimmed at snapshot "
        "boundaries, if the workers share this process's retain_signals/retain_age); the oldest retained "
        "signal is a snapshot")
    records = await anyio.run_process(_cli(url, keys, "replay", "--resource", "u", "--json"), cwd=ROOT)
    lines = [json.loads(line) for line in records.stdout.decode().splitlines()]
    assert [(r["version"], r["firstRetainedVersion"]) for r in lines] == [(v, 7) for v in range(7, 11)]
    verified = await anyio.run_process(_cli(url, keys, "replay", "--resource", "u", "--verify"), cwd=ROOT)
    out = verified.stdout.decode()
    assert "verified 4 signals (signal versions 7..10)" in out and "history before signal version 7 was trimmed" in out


async def test_replay_does_not_promise_a_snapshot_when_the_stream_was_cut_below_it(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A stream cut by something other than the workers (XTRIM MAXLEN) begins with a delta:
    replay's first line says so instead of "the oldest retained signal is a snapshot" (which
    it printed before failing on the delta; found by an attack run), and the replay fails
    naming the delta with no snapshot before it."""
    url = redis_server.url
    await _write(url, redis, keys, [_doc(n) for n in range(5)], snapshot_every=100)
    await redis.xtrim(keys.signals("r:u"), maxlen=2, approximate=False)
    text = await anyio.run_process(_cli(url, keys, "replay", "--resource", "u"), cwd=ROOT, check=False)
    first = text.stdout.decode().splitlines()[0]
    assert first.startswith("history before signal version 4 is gone")
    assert "the oldest retained signal is a delta" in first
    assert text.returncode == 1 and b"no snapshot before it" in text.stderr


@pytest.mark.parametrize(("writes", "every", "cut_to", "junk_at"), [
    (11, 4, 9, None),  # the cut leaves versions 3..11: a delta first, snapshots 5 and 9 listed after it
    (200, 2, 59, None),  # 71 listed snapshots lie below the cut: more than one walk's page
    (11, 4, 9, 2),  # junk in the list after the cut (in place of snapshot 9)
    (11, 4, 9, 0),  # junk at the head of the list
    (310, 300, 305, None),  # a long chain: the first snapshot 295 entries past the cut (second review)
])
async def test_a_stream_cut_below_its_snapshot_starts_at_its_first_snapshot_again(
    redis_server: RedisServer, redis: Redis, keys: Keys, writes: int, every: int, cut_to: int, junk_at: int | None
) -> None:
    """After a cut by hand (XTRIM MAXLEN) left the stream starting at a delta, the workers'
    next snapshot trims it to its first snapshot, whatever the retention floors say, and
    keeps every signal from there on: the stream starts at a snapshot again and replays.
    (Before, the orphaned deltas stayed until the floors let a later snapshot trim them,
    and every replay failed on them. A first repair trimmed to the newest snapshot when
    many listed snapshots lay below the cut or junk was in the list, found by a review.)"""
    url, lane = redis_server.url, "r:u"
    await _write(url, redis, keys, [_doc(n) for n in range(writes)], snapshot_every=every, retain_signals=1000)
    before = await check_lane(redis, keys, lane)
    await redis.xtrim(keys.signals(lane), maxlen=cut_to, approximate=False)
    head = before[-cut_to].version
    assert before[-cut_to].mode == "delta"
    if junk_at is not None:
        await redis.lset(keys.snapshots(lane), junk_at, "junk")
    more = every - writes % every + 1  # up to and past the next snapshot
    await _write(url, redis, keys, [_doc(1000 + n) for n in range(more)], snapshot_every=every, retain_signals=1000)
    signals = await check_lane(redis, keys, lane)  # starts at a snapshot; rebuilds; matches the document
    first = min(s.version for s in before if s.mode == "snapshot" and s.version >= head)
    assert [s.version for s in signals] == list(range(first, writes + more + 1))
    ids = [entry_id for entry_id, _ in await redis.xrange(keys.signals(lane))]
    listed = await redis.lrange(keys.snapshots(lane), 0, -1)
    snapshot_ids = [i for i, s in zip(ids, signals, strict=True) if s.mode == "snapshot"]
    # the list names snapshots of the stream only, in order (junk the walk did not reach yet
    # aside); it may have been restarted (what a page could not drop restarts it)
    named = [entry for entry in listed if entry != "junk"]
    assert named and set(named) <= set(snapshot_ids) and named == sorted(named, key=snapshot_ids.index)


async def test_a_cut_with_foreign_entries_before_the_first_snapshot_keeps_that_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """300 entries no worker wrote, then the lane's re-snapshot, then a cut to a delta: the
    repair finds the re-snapshot past the foreign entries and trims there, not to the
    newest snapshot (which lost the 20 signals from it: found by the second review)."""
    url, lane = redis_server.url, "r:u"
    await _write(url, redis, keys, [_doc(n) for n in range(5)], snapshot_every=20, retain_signals=1000)
    async with redis.pipeline(transaction=False) as pipe:
        for n in range(300):
            pipe.xadd(keys.signals(lane), {"x": str(n)})
        await pipe.execute()
    await _write(url, redis, keys, [_doc(100 + n) for n in range(10)], snapshot_every=20, retain_signals=1000)
    length = await redis.xlen(keys.signals(lane))
    await redis.xtrim(keys.signals(lane), maxlen=length - 2, approximate=False)  # starts at version 3, a delta
    await _write(url, redis, keys, [_doc(200 + n) for n in range(20)], snapshot_every=20, retain_signals=1000)
    signals = await check_lane(redis, keys, lane)
    versions = [s.version for s in signals]  # the re-snapshot caught up on several writes at once
    assert signals[0].mode == "snapshot" and versions == list(range(6, versions[-1] + 1)) and versions[-1] > 20


@pytest.mark.parametrize(("omit", "expected"), [
    (False, [(13, "snapshot"), (14, "delta")]),
    (True, [(12, "snapshot"), (13, "delta"), (14, "delta")]),
])
async def test_a_stream_cut_to_deltas_only_starts_at_the_next_snapshot(
    redis_server: RedisServer, redis: Redis, keys: Keys, omit: bool, expected: list[tuple[int, str]]
) -> None:
    """A cut that leaves no snapshot at all (and junk in the list): the next snapshot is
    where the stream starts again. With deltas carrying their value, a new worker goes on
    from version 11's text (delta 12, snapshot 13 by ``snapshot_every``); without it
    (``omit_delta_value``, the default) version 11's text cannot be rebuilt, so version 12
    is a snapshot."""
    url, lane = redis_server.url, "r:u"
    options: dict[str, Any] = {"snapshot_every": 4, "retain_signals": 50, "omit_delta_value": omit}
    await _write(url, redis, keys, [_doc(n) for n in range(11)], **options)
    await redis.xtrim(keys.signals(lane), maxlen=2, approximate=False)  # versions 10..11: deltas
    await redis.lpush(keys.snapshots(lane), "junk")
    await _write(url, redis, keys, [_doc(200 + n) for n in range(3)], **options)
    signals = await check_lane(redis, keys, lane)
    assert [(s.version, s.mode) for s in signals] == expected


async def test_subscribe_from_start_for_more_than_can_arrive_ends_at_its_timeout(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """``subscribe --from-start --count 20`` on a finished lane of 12 signals delivers the
    12, says on stderr that it delivered everything retained and waits, and with --timeout
    exits 1 naming what arrived; --count 12 exits 0; a bad --timeout is exit 2."""
    url = redis_server.url
    await _write(url, redis, keys, [f"# Profile\n- visits: {n}" for n in range(12)],
                 retain_signals=DEFAULT_RETAIN_SIGNALS)
    base = ["subscribe", "--resource", "u", "--from-start", "--json"]
    waited = await anyio.run_process(_cli(url, keys, *base, "--count", "20", "--timeout", "1.5"), cwd=ROOT,
                                     check=False)
    assert waited.returncode == 1
    assert len(waited.stdout.decode().splitlines()) == 12
    err = waited.stderr.decode()
    assert "delivered all 12 retained signals (signal versions 1..12), from the oldest retained snapshot" in err
    assert "waiting for 8 more" in err and "--timeout 1.5s expired after 12 of 20 signals" in err
    done = await anyio.run_process(_cli(url, keys, *base, "--count", "12", "--timeout", "30"), cwd=ROOT)
    assert len(done.stdout.decode().splitlines()) == 12
    # the workers that wrote the lane have stopped: the one warning saying so is all of stderr
    assert all("subscribe.no_worker" in line for line in done.stderr.decode().splitlines())
    bad = await anyio.run_process(_cli(url, keys, *base, "--timeout", "soon"), cwd=ROOT, check=False)
    assert bad.returncode == 2 and b"--timeout takes a number of seconds" in bad.stderr
    for count in ("0", "-1", "many"):  # 0 tailed forever with no note, -1 printed one signal and exited 0
        bad = await anyio.run_process(_cli(url, keys, *base, "--count", count), cwd=ROOT, check=False)
        assert bad.returncode == 2 and b"--count takes a number of signals (1 to" in bad.stderr, count



@pytest.mark.parametrize("retain", [5, 9])
async def test_writes_without_a_signal_leave_the_retained_signal_count_whole(
    redis_server: RedisServer, redis: Redis, keys: Keys, retain: int
) -> None:
    """A write whose text is unchanged (the same cacheKey) moves the document's version but
    emits no signal. Retention counts signals (a signal's ``version`` is the lane's signal
    count, not the document's version), so a lane whose every other write is a repeat still
    keeps ``retain`` signals, trimmed as far as that allows."""
    texts = [_doc(n // 2) for n in range(40)]  # each text twice: 40 document versions, 20 signals
    await _write(redis_server.url, redis, keys, texts, snapshot_every=4, retain_signals=retain)
    signals = await check_lane(redis, keys, "r:u")  # starts at a snapshot, rebuilds, verifies
    assert await redis.hget(keys.doc("r:u"), "version") == "40" and signals[-1].version == 20
    assert len(signals) >= retain
    later = [i for i, s in enumerate(signals) if s.mode == "snapshot" and i > 0 and len(signals) - i >= retain]
    assert not later, f"trimmable at {later}: {[s.version for s in signals]}"
