"""Fault combinations the other fault tests miss: silent servers, paused workers whose
entries were reclaimed, consumers leaving the group, histories trimmed while read."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.memory import WorkingMemoryConfig
from signals.errors import VerifyError
from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.replay import iter_signals, materialise, read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.verify import verify_lane
from tests.integration.helpers import (
    check_lane,
    lanes_of,
    running_workers,
    spawn_worker,
    wait_caught_up,
    wait_ready,
)
from workers.engine.reader import GroupReader
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


@pytest.mark.parametrize("extra", [[], ["--count", "2"], ["--from-start"]])
def test_subscribe_timeout_bounds_connecting_too(silent_server: str, extra: list[str]) -> None:
    """``subscribe --timeout`` bounds the whole command: against a server that accepts and
    never answers, the namespace check and the stream probe ran before the timeout began,
    so ``--timeout 1`` waited for the client's own read timeout (about 5 s) and reported
    that instead. It now ends at its own timeout, exit 1 (the lane was never reached: not
    an empty tail's exit 0), saying so in one line."""
    args = [sys.executable, "-m", "workers", "subscribe", "--redis-url", silent_server, "--resource", "u",
            "--timeout", "1", *extra]
    done = subprocess.run(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          timeout=120, check=False)
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert done.stdout == b""
    assert len(err.splitlines()) == 1, err
    assert "--timeout 1s expired before Redis at redis://127.0.0.1:" in err, err
    assert "Timeout reading" not in err, err


async def _pending_for(redis: Redis, keys: Keys, consumer: str | None = None) -> int:
    total = 0
    for stream in keys.all_writes():
        summary = await redis.xpending(stream, GROUP)
        total += sum(int(c["pending"]) for c in summary["consumers"] or [] if consumer in (None, c["name"]))
    return total


@pytest.mark.anyio
@pytest.mark.redis
async def test_a_paused_worker_resumes_after_its_entries_were_reclaimed(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A duplicate delivery between live processes: worker A is frozen (SIGSTOP) holding
    read, unacknowledged entries; worker B (another process) reclaims them after
    ``claim_idle_ms`` and signals the lanes on; writers keep replacing (Markdown, resource
    scope) and merging (JSON, thread scope) meanwhile; A is then resumed (SIGCONT) with its
    stale batch. Once caught up: every lane rebuilds its stored document, versions run
    without a gap, no write version is signalled twice, nothing is pending or dead-lettered,
    and both workers stop gracefully (exit 0). The fault tests kill the first worker; here it
    comes back."""
    md = WorkingMemoryStore(redis, keys=keys)
    js = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(scope="thread", schema={"type": "object"}))
    for t in range(4):
        await js.create_thread(f"th{t}", "owner")
    done = anyio.Event()

    async def writer(k: int) -> None:
        n = 0
        while not done.is_set():
            n += 1
            lane = (n + k) % 8
            if n % 3:
                await md.replace(f"u{lane}", f"# Profile {lane}\n- fact a\n- round {n} by {k}\n- fact b")
            else:
                await js.merge("owner", {f"w{k}": {"n": n}, "drop": None if n % 2 else 1}, thread_id=f"th{lane % 4}")
            await anyio.sleep(0.002)

    a = spawn_worker(redis_server.url, keys, "paused", batch=50)
    b: subprocess.Popen[bytes] | None = None
    try:
        await wait_ready(a)
        async with anyio.create_task_group() as tg:
            for k in range(3):
                tg.start_soon(writer, k)
            with anyio.fail_after(20):  # freeze A at a moment it holds entries read, not acknowledged
                while True:
                    a.send_signal(signal.SIGSTOP)
                    await anyio.sleep(0.05)
                    if held := await _pending_for(redis, keys, "paused"):
                        break
                    a.send_signal(signal.SIGCONT)
                    await anyio.sleep(0.01)
            b = spawn_worker(redis_server.url, keys, "other", batch=5)
            await wait_ready(b)
            with anyio.fail_after(30):  # B reclaims A's entries (claim_idle_ms 500) while the writes go on
                while await _pending_for(redis, keys, "paused"):
                    await anyio.sleep(0.05)
            a.send_signal(signal.SIGCONT)  # A wakes up with its stale batch
            await anyio.sleep(1.0)
            done.set()
        assert held > 0
        await wait_caught_up(redis, keys, limit_s=60)
        with anyio.fail_after(20):
            while await _pending_for(redis, keys):
                await anyio.sleep(0.05)
        lanes = await lanes_of(redis, keys)
        assert len(lanes) == 12
        for lane in lanes:
            signals = await check_lane(redis, keys, lane)  # chain rebuilds the document, no write version twice
            versions = [s.version for s in signals]
            assert versions == list(range(1, len(versions) + 1)), lane
        for p in range(keys.partitions):
            assert await redis.xlen(keys.dead_letters(p)) == 0
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        assert a.wait(30) == 0
        assert b is not None and b.wait(30) == 0


async def _blocked(admin: Redis, commands: int) -> bool:
    """``commands`` clients are held by a CLIENT PAUSE (flag ``b``)."""
    clients = await admin.client_list()
    return sum("b" in c["flags"] for c in clients) >= commands


@pytest.mark.anyio
@pytest.mark.redis
async def test_leaving_the_group_keeps_what_a_same_named_consumer_just_read(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A graceful stop leaves the consumer group only where nothing is pending for its
    name. It looked (XPENDING) and deleted (XGROUP DELCONSUMER) in two round trips, so a
    process restarted under the same ``--consumer-name`` (the README's way to resume a
    worker's entries at once) that read entries in between lost them from the group's
    pending list with the delete: no worker could reclaim them, and had it died before
    committing, those writes were never signalled. The interleaving is made certain with
    CLIENT PAUSE WRITE: the new process's XREADGROUP is queued first, the stopping
    process's check runs (a read is not paused) and its delete is queued behind the read.
    The check and the delete are now one script, so the delete sees the new entries."""
    store = WorkingMemoryStore(redis, keys=keys)
    for n in range(3):
        await store.replace("u", f"# Profile\n- visit {n}")
    stream = keys.writes(keys.partition("r:u"))
    stopping = GroupReader(connect(redis_server.url), keys, "same-name", batch=10, block_ms=10)
    await stopping.ensure_groups()
    restarted, admin = connect(redis_server.url), connect(redis_server.url)
    read: list[object] = []
    try:
        await admin.execute_command("CLIENT", "PAUSE", 20_000, "WRITE")
        try:
            async with anyio.create_task_group() as tg:
                async def new_process_reads() -> None:
                    read.extend(await restarted.xreadgroup(GROUP, "same-name", {stream: ">"}, count=10))
                tg.start_soon(new_process_reads)
                with anyio.fail_after(10):
                    while not await _blocked(admin, 1):
                        await anyio.sleep(0.01)
                tg.start_soon(stopping.leave_group)
                with anyio.fail_after(10):
                    while not await _blocked(admin, 2):
                        await anyio.sleep(0.01)
                await admin.execute_command("CLIENT", "UNPAUSE")
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        [(_, entries)] = read  # type: ignore[misc]
        assert len(entries) == 3
        summary = await redis.xpending(stream, GROUP)
        assert summary["pending"] == 3, "the entries the restarted process read were dropped from the group"
        assert [c["name"] for c in summary["consumers"]] == ["same-name"]
    finally:
        await stopping.redis.aclose()
        await restarted.aclose()
        await admin.aclose()


@pytest.mark.anyio
@pytest.mark.redis
async def test_a_history_read_in_pages_while_the_stream_is_trimmed_has_no_hole(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A lane's history is read in pages of XRANGE (``read_signals``: ``replay``, ``replay
    --verify``, ``export``). When the workers trimmed the stream at a snapshot boundary
    between two pages (retention, most often ``retain_age`` over a long, busy lane), the
    next page began past the trimmed entries and the reader went on with a hole in the
    history: a healthy lane failed to verify with a version gap. Pages of 2 here, the trim
    made between them by hand (XTRIM MINID at a snapshot, as the worker's retention trims).
    The reader now stops at the hole (``HistoryTrimmedError``) and ``read_signals`` reads
    the history again from the stream's new start."""
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(redis_server.url, keys, 1, policy="mastra", snapshot_every=3):
        for n in range(9):
            await store.replace("u", "# Profile\n- const\n" + "".join(f"- visit {i}\n" for i in range(n + 1)))
        await wait_caught_up(redis, keys)
    history = await read_signals(redis, keys, "r:u")
    assert [s.mode[0] for _, s in history] == list("sddsddsdd")
    read: list[int] = []
    with pytest.raises(VerifyError):
        async for _, signal in iter_signals(redis, keys, "r:u", page=2):
            read.append(signal.version)
            if signal.version == 2:  # the first page is read: trim to v7's snapshot
                await redis.xtrim(keys.signals("r:u"), minid=history[6][0], approximate=False)
    assert read == [1, 2], "the history read went on past a hole"
    again = await read_signals(redis, keys, "r:u", page=2)
    assert [s.version for _, s in again] == [7, 8, 9]
    assert list(materialise(again))[-1].value == list(materialise(history))[-1].value
    await verify_lane(redis, keys, "r:u")
