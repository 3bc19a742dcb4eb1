"""The pipeline against real redis-server processes: writes, workers, exactly one signal per version."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from signals.core.memory import WorkingMemoryConfig
from signals.errors import (
    ConflictError,
    CorruptDataError,
    DocumentTooLargeError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    ReadOnlyError,
    SchemaValidationError,
    ThreadOwnerError,
)
from signals.streams.client import queue_script
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, lanes_of, running_workers, wait_caught_up
from workers.engine import chunking
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

JSON = WorkingMemoryConfig(schema={"type": "object"})

WRITER = textwrap.dedent("""
    import sys, anyio
    from signals.streams.keys import Keys
    from signals.core.memory import WorkingMemoryConfig
    from signals.streams.store import WorkingMemoryStore
    url, ns, who, n, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    async def main():
        cfg = WorkingMemoryConfig(schema={"type": "object"}) if mode == "merge" else WorkingMemoryConfig()
        store = WorkingMemoryStore.from_url(url, keys=Keys(ns, 4), config=cfg)
        for j in range(n):
            if mode == "merge":
                await store.merge("shared", {f"{who}_{j}": j})
            else:
                await store.replace("shared", f"# writer {who}\\n- step {j}")
        await store.aclose()
    anyio.run(main)
""")


def _writers(url: str, keys: Keys, count: int, n: int, mode: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, keys.namespace, f"w{i}", str(n), mode])
             for i in range(count)]
    for proc in procs:
        assert proc.wait(300) == 0


async def test_concurrent_merges_from_processes_lose_no_field(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """8 writer processes x 300 merges on one lane: every field is there, version 2400."""
    await anyio.to_thread.run_sync(_writers, redis_server.url, keys, 8, 300, "merge")
    store = WorkingMemoryStore(redis, keys=keys, config=JSON)
    doc = await store.get("shared")
    assert doc is not None and doc.version == 2400
    data = json.loads(doc.data)
    assert data == {f"w{i}_{j}": j for i in range(8) for j in range(300)}


async def test_concurrent_replaces_end_at_last_committed_version(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """Replace writes from 4 processes: the document is the last committed write's."""
    await anyio.to_thread.run_sync(_writers, redis_server.url, keys, 4, 100, "replace")
    doc = await WorkingMemoryStore(redis, keys=keys).get("shared")
    assert doc is not None and doc.version == 400
    stream = keys.writes(keys.partition("r:shared"))
    last = (await redis.xrevrange(stream, count=1))[0][1]["e"]
    assert json.loads(last)["version"] == 400 and json.loads(last)["data"] == doc.data


@pytest.mark.parametrize("workers", [1, 4])
async def test_workers_emit_one_signal_per_version(
    redis_server: RedisServer, redis: Redis, keys: Keys, workers: int
) -> None:
    """20,000 writes on 500 lanes with 1 or 4 workers: every lane's chain is intact and current."""
    rng = random.Random(workers)
    store = WorkingMemoryStore(redis, keys=keys)
    docs = {f"u{i}": [f"- fact {k}" for k in range(8)] for i in range(500)}

    async def writer(lanes: list[str]) -> None:
        for _ in range(40):
            for resource in lanes:
                lines = docs[resource]
                r = rng.random()
                if r < 0.2:
                    pass  # exact repeat: must dedup
                elif r < 0.6:
                    lines[rng.randrange(len(lines))] = f"- changed {rng.random():.5f}"
                else:
                    lines.append(f"- new {rng.random():.5f}")
                await store.replace(resource, "# Profile\n" + "\n".join(lines))

    async with running_workers(redis_server.url, keys, workers) as consumers:
        async with anyio.create_task_group() as tg:
            names = list(docs)
            for k in range(10):
                tg.start_soon(writer, names[k::10])
        await wait_caught_up(redis, keys, limit_s=120)
    lanes = await lanes_of(redis, keys)
    assert len(lanes) == 500
    for lane in lanes:
        await check_lane(redis, keys, lane)
    total = sum(c.stats.signals for c in consumers)
    skipped = sum(c.stats.skipped for c in consumers)
    assert total + skipped == 20_000
    assert skipped > 0  # the exact repeats were deduplicated


async def test_thread_owner_is_enforced(redis: Redis, keys: Keys) -> None:
    """A thread belongs to one resource forever; writes naming another are refused."""
    store = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(scope="thread"))
    await store.create_thread("t1", "alice", initial="# Notes\n- hello")
    with pytest.raises(ThreadOwnerError):
        await store.replace("bob", "# mine now", thread_id="t1")
    with pytest.raises(ThreadOwnerError):
        await store.create_thread("t1", "bob")
    resource_store = WorkingMemoryStore(redis, keys=keys)
    with pytest.raises(ThreadOwnerError):
        await resource_store.replace("bob", "# bob", thread_id="t1")
    doc = await store.get("alice", "t1")
    assert doc is not None and doc.data == "# Notes\n- hello" and doc.version == 1


async def test_idempotency_key_applies_once(redis: Redis, keys: Keys) -> None:
    """A retried write with the same idempotency key returns the first version, stores once."""
    store = WorkingMemoryStore(redis, keys=keys, config=JSON)
    v1 = await store.merge("u", {"n": 1}, idempotency_key="op-1")
    v2 = await store.merge("u", {"n": 1}, idempotency_key="op-1")
    assert v1 == v2 == 1
    stream = keys.writes(keys.partition("r:u"))
    assert await redis.xlen(stream) == 1


async def test_an_idempotency_key_with_another_request_is_refused(redis: Redis, keys: Keys) -> None:
    """The key's retry (the same request: a merge object in another key order, even after
    another writer moved the lane) returns the key's version; the same key with other text,
    another merge or another operation is refused naming that version, and nothing is
    written (it returned the version silently, as if the new write had been applied). A
    key stored before fingerprints (a bare version) still answers as a retry."""
    store = WorkingMemoryStore(redis, keys=keys, config=JSON)
    assert await store.merge("u", {"n": 1, "m": {"a": 1, "b": 2}}, idempotency_key="op-1") == 1
    assert await store.merge("u", {"other": True}) == 2  # another writer
    assert await store.merge("u", {"m": {"b": 2, "a": 1}, "n": 1}, idempotency_key="op-1") == 1
    for update in ({"n": 2}, '{"n": 1}', {"n": 1, "m": {"a": 1, "b": 2}, "x": None}):
        with pytest.raises(IdempotencyKeyReusedError, match=r"op-1.*version 1") as refused:
            await store.merge("u", update, idempotency_key="op-1")
        assert refused.value.version == 1
    stream = keys.writes(keys.partition("r:u"))
    assert await redis.xlen(stream) == 2
    assert (await store.get("u")).version == 2  # type: ignore[union-attr]
    # a merge given as JSON text is the same request in any layout, and as the dict
    assert await store.merge("u", '{"c": 1, "d": [1, 2]}', idempotency_key="op-2") == 3
    assert await store.merge("u", '{"d":[1,2],"c":1}', idempotency_key="op-2") == 3
    assert await store.merge("u", {"d": [1, 2], "c": 1}, idempotency_key="op-2") == 3
    with pytest.raises(IdempotencyKeyReusedError):
        await store.merge("u", '{"c": 1, "d": [2, 1]}', idempotency_key="op-2")
    thread = WorkingMemoryStore(redis, keys=keys)  # another resource's retry of a thread write
    assert await thread.replace("u", "# T", thread_id="th1", scope="thread", idempotency_key="t") == 1
    with pytest.raises(ThreadOwnerError):
        await thread.replace("intruder", "# T", thread_id="th1", scope="thread", idempotency_key="t")
    for bad in ("1 not-a-fingerprint", "1 ", " 1", "1\n"):
        await redis.set(keys.idempotency("r:u", "bad"), bad)
        with pytest.raises(CorruptDataError, match="not a version and a request fingerprint"):
            await store.merge("u", {"n": 1}, idempotency_key="bad")


async def test_a_retry_is_answered_whatever_the_lane_became(redis: Redis, keys: Keys) -> None:
    """A retry is answered before the write is computed (second review): with the
    if_version its first attempt passed, after another writer moved the lane so far that
    the schema would refuse the merge now, and with its numbers written another way."""
    schema = WorkingMemoryConfig(schema={"type": "object", "maxProperties": 2})
    store = WorkingMemoryStore(redis, keys=keys, config=schema)
    assert await store.merge("u", {"a": 100, "b": 1}, idempotency_key="k", if_version=0) == 1
    assert await store.merge("u", {"a": 100, "b": 1}, idempotency_key="k", if_version=0) == 1
    assert await store.merge("u", {"a": None, "b": None, "e": 1, "f": 2}) == 2  # another writer
    for retry in ({"a": 100, "b": 1}, '{"b": 1, "a": 1e2}', {"a": 100.0, "b": 1}):
        assert await store.merge("u", retry, idempotency_key="k", if_version=0) == 1
    assert await redis.xlen(keys.writes(keys.partition("r:u"))) == 2

    text = WorkingMemoryStore(redis, keys=keys)
    assert await text.replace("t", "# T\n- one", idempotency_key="k") == 1
    assert await text.replace("t", "# T\n- one", idempotency_key="k") == 1
    with pytest.raises(IdempotencyKeyReusedError):
        await text.replace("t", "# T\n- two", idempotency_key="k")
    with pytest.raises(IdempotencyKeyReusedError):
        await text.replace("t", "# T\n- one", idempotency_key="k", op="create")
    await redis.set(keys.idempotency("r:t", "old"), "1")  # a key from before fingerprints
    assert await text.replace("t", "# T\n- anything", idempotency_key="old") == 1
    assert (await text.get("t")).data == "# T\n- one"  # type: ignore[union-attr]


async def test_keyed_writes_refuse_bad_input_and_bad_keys_as_unkeyed_ones_do(
    redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Third review: a replace of something that is not text is InvalidInputError with a key
    too (it was a bare TypeError); a thread record of another type is CorruptDataError
    naming it on a keyed retry too (it was redis's ResponseError); and a retry whose first
    attempt lands just after the key was read still answers with its version (it was a
    ConflictError from the if_version the first attempt had just passed)."""
    text = WorkingMemoryStore(redis, keys=keys)
    for bad in (None, b"# T", {"a": 1}, 5):
        with pytest.raises(InvalidInputError, match="must be a string"):
            await text.replace("v", bad, idempotency_key="k")  # type: ignore[arg-type]
    assert await text.replace("u", "# T", thread_id="th1", scope="thread", idempotency_key="k") == 1
    await redis.delete(keys.thread("th1"))
    await redis.set(keys.thread("th1"), "junk")
    with pytest.raises(CorruptDataError, match="another type"):
        await text.replace("u", "# T", thread_id="th1", scope="thread", idempotency_key="k")

    first, second = WorkingMemoryStore(redis, keys=keys), WorkingMemoryStore(redis, keys=keys)
    real = second._retried
    raced: list[int] = []

    async def first_lands_after_the_key_was_read(*args: Any) -> int | None:
        answer = await real(*args)
        if not raced:
            raced.append(await first.replace("race", "# R", idempotency_key="r", if_version=0))
        return answer

    monkeypatch.setattr(second, "_retried", first_lands_after_the_key_was_read)
    assert await second.replace("race", "# R", idempotency_key="r", if_version=0) == 1
    assert raced == [1]


async def test_refused_writes_store_nothing(redis: Redis, keys: Keys) -> None:
    """Schema violations, oversized documents, conflicts and read-only clients leave no trace."""
    cfg = WorkingMemoryConfig(schema={"type": "object", "properties": {"age": {"type": "integer"}}},
                              max_bytes=100)
    store = WorkingMemoryStore(redis, keys=keys, config=cfg)
    await store.merge("u", {"age": 1})
    with pytest.raises(SchemaValidationError, match="age"):
        await store.merge("u", {"age": "x"})
    with pytest.raises(DocumentTooLargeError):
        await store.merge("u", {"bio": "x" * 200})
    with pytest.raises(ConflictError):
        await store.merge("u", {"age": 2}, if_version=0)
    with pytest.raises(ReadOnlyError):
        await WorkingMemoryStore(redis, keys=keys, config=cfg, read_only=True).merge("u", {"age": 3})
    doc = await store.get("u")
    assert doc is not None and (doc.version, doc.data) == (1, '{"age":1}')
    assert await redis.xlen(keys.writes(keys.partition("r:u"))) == 1


async def test_fresh_worker_rebuilds_prior_when_deltas_omit_value(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """With values left out of deltas, a new worker (empty cache) rebuilds the delta base
    from the lane's last snapshot chain and keeps the chain intact: only the first signal
    is a snapshot (a restart once made the next write a snapshot: a review caught it)."""
    store = WorkingMemoryStore(redis, keys=keys)
    lines = [f"- fact {i}: a line long enough for deltas to win" for i in range(12)]
    for round_ in range(3):
        async with running_workers(redis_server.url, keys, 1, omit_delta_value=True):
            for k in range(4):
                lines[(round_ * 4 + k) % 12] = f"- fact changed in round {round_} step {k}"
                await store.replace("u", "# Notes\n" + "\n".join(lines))
                await wait_caught_up(redis, keys)  # one signal per write (no catch-up coalescing)
    signals = await check_lane(redis, keys, "r:u")
    deltas = [s for s in signals if s.mode == "delta"]
    assert [s.mode for s in signals] == ["snapshot"] + ["delta"] * 11 and all(s.value is None for s in deltas)


async def test_retention_trims_at_snapshots_and_write_streams_are_trimmed(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """Signal streams keep at least ``retain_signals`` signals, trimmed at the newest snapshot
    that leaves that many (so they start at a snapshot); processed write events are
    trimmed from the partition streams."""
    store = WorkingMemoryStore(redis, keys=keys)
    lines = [f"- fact {i}: a line long enough for deltas to win" for i in range(12)]
    async with running_workers(redis_server.url, keys, 1, snapshot_every=3, retain_signals=4):
        for n in range(20):
            lines[n % 12] = f"- fact changed {n}"
            await store.replace("u", "# Notes\n" + "\n".join(lines))
        await wait_caught_up(redis, keys)
        with anyio.fail_after(10):  # maintenance runs every 0.2 s in these tests
            while sum([await redis.xlen(keys.writes(p)) for p in range(keys.partitions)]):
                await anyio.sleep(0.05)
    signals = await check_lane(redis, keys, "r:u")
    # snapshots at 1, 4, ..., 16, 19: from 19 only 2 signals follow, from 16 five (>= 4)
    assert [(s.version, s.mode) for s in signals] == [
        (16, "snapshot"), (17, "delta"), (18, "delta"), (19, "snapshot"), (20, "delta")]
    assert await redis.lrange(keys.snapshots("r:u"), 0, -1) == [i for i, _ in await redis.xrange(
        keys.signals("r:u"))][::3]


def test_cli_exit_codes(redis_server: RedisServer, keys: Keys) -> None:
    """write/get: 0 ok, 2 bad input, 3 conflict, with a one-line message on stderr."""
    base = [sys.executable, "-m", "workers"]
    flags = ["--redis-url", redis_server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args, *flags], capture_output=True, text=True, timeout=60, check=False)

    ok = run("write", "--resource", "cli", "--markdown", "# Me\n- likes tea")
    assert (ok.returncode, ok.stdout.strip()) == (0, "1")
    conflict = run("write", "--resource", "cli", "--markdown", "# Me", "--if-version", "0")
    assert conflict.returncode == 3 and conflict.stderr.count("\n") == 1 and "expected 0" in conflict.stderr
    bad = run("write", "--resource", "cli", "--merge", "[1]")
    assert bad.returncode == 2 and "markdown" in bad.stderr.lower()
    neither = run("write", "--resource", "cli")
    assert neither.returncode == 2 and "exactly one of" in neither.stderr
    got = run("get", "--resource", "cli")
    assert (got.returncode, got.stdout) == (0, "# Me\n- likes tea\n")
    invalid = subprocess.run([*base, "get", "--resource", "cli", "--partitions", "0", "--redis-url", redis_server.url],
                             capture_output=True, text=True, timeout=60, check=False)
    assert invalid.returncode == 2 and "partitions" in invalid.stderr and "Traceback" not in invalid.stderr
    env = {k: v for k, v in os.environ.items() if k != "WM_SIGNALS_REDIS_URL"}
    no_url = subprocess.run([*base, "get", "--resource", "cli", "--cluster"], capture_output=True, text=True,
                            timeout=60, check=False, env=env)
    assert no_url.returncode == 2
    assert no_url.stderr.strip().endswith("cluster mode needs a Redis URL (a node of the cluster)")


async def test_one_lane_with_more_events_than_lua_can_unpack_in_one_batch(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """9,000 writes of one lane read in one batch: the commit acknowledges them all (Lua's
    unpack takes about 8,000 values; one XACK of them all failed, and the lane's events
    were retried and dead-lettered whole)."""
    store = WorkingMemoryStore(redis, keys=keys)
    for n in range(9_000):
        await store.replace("busy", f"# Busy\n- write {n % 3}")
    async with running_workers(redis_server.url, keys, 1, batch=10_000):
        with anyio.fail_after(60):
            while await redis.hget(keys.track("r:busy"), "wv") != "9000":
                await anyio.sleep(0.05)
    signals = await check_lane(redis, keys, "r:busy")
    assert signals[-1].write_version == 9_000
    assert sum([await redis.xlen(keys.dead_letters(p)) for p in range(keys.partitions)]) == 0
    assert sum([await redis.hlen(keys.failures(p)) for p in range(keys.partitions)]) == 0, "commits failed"


async def test_a_batch_committed_in_chunks_signals_every_version_once(
    redis_server: RedisServer, redis: Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 writes on 200 lanes read in one batch: planned and committed in chunks of
    partitions (overlapping), every lane ends with one signal per version, nothing
    dead-lettered; a second round on the same lanes goes the steady path, chunked too."""
    chunked: list[int] = []
    real = chunking.chunks

    def spy(lanes: list[Any]) -> list[list[Any]]:
        chunks = real(lanes)
        chunked.append(len(chunks))
        return chunks

    monkeypatch.setattr(chunking, "chunks", spy)
    store = WorkingMemoryStore(redis, keys=keys)
    for turn in range(2):
        async with redis.pipeline(transaction=False) as pipe:  # the store's own script, many writes at once
            for n in range(3_000):
                lane = f"u{n % 200}"
                ref = store.ref(lane)
                version = turn * 15 + n // 200
                args = store.write_script.args(ref, version, f"# U\n- fact {version}", op="replace", owner="",
                                          idempotency_key=None)
                await queue_script(pipe, store.write_script.script, store.write_script.keys_for(ref, "", None), args)
            assert all(r[0] == "ok" for r in await pipe.execute())
        async with running_workers(redis_server.url, keys, 1, batch=10_000, retain_signals=100):
            await wait_caught_up(redis, keys)
    for n in range(200):
        signals = await check_lane(redis, keys, f"r:u{n}")
        assert [s.write_version for s in signals] == list(range(1, 31)), f"r:u{n}"
    assert sum([await redis.xlen(keys.dead_letters(p)) for p in range(keys.partitions)]) == 0
    assert max(chunked) > 1, "no batch was chunked"
