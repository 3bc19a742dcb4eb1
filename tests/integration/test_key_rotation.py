"""Signing keys rotate with an overlap (issue 30, finding 6), against real Redis and workers.

The procedure of ``docs/operations/signing-keys.md``: readers accept the old and the new
key, workers switch to signing with the new one, each lane's next signal is a snapshot
under it, then the old key is dropped. At no step does an agent refuse a genuine signal
or keep old memory.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.signing import Signer, key_id
from signals.streams.keys import Keys
from signals.streams.replay import read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
OLD, NEW = b"old-key-" + b"o" * 24, b"new-key-" + b"n" * 24
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(10)]


def _doc(n: int) -> str:
    return "# Notes\n" + "\n".join(LINES) + f"\n- counter {n}"


async def _write(url: str, redis: Redis, keys: Keys, numbers: range, **worker: Any) -> None:
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, **worker):
        for n in numbers:
            await store.replace("u", _doc(n))
        await wait_caught_up(redis, keys)


async def test_a_rotation_with_an_overlap_loses_no_signal(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Signals 1..3 under the old key; an agent that accepts both keys holds v3. The workers
    switch to the new key: v4 (a one-line change) is a snapshot signed with it, and that
    agent's next model call gets it; v5 is a delta again. An agent on the new key alone
    (the old one dropped) reads the lane from v4 and refuses nothing; one on the old key
    alone refuses v4 (the reason readers get the new key first)."""
    url = redis_server.url
    await _write(url, redis, keys, range(1, 4), signing_key=OLD.decode())
    overlap = Signer(OLD, verify_keys=(NEW,))
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", signer=overlap)
    await agent.start()
    held = {inj.id for inj in (await agent.before_model_call(set())).add}

    rotated = {"signing_key": NEW.decode(), "verify_keys": [OLD.decode()]}
    await _write(url, redis, keys, range(4, 5), **rotated)
    signals = [s for _, s in await read_signals(redis, keys, "r:u", signer=Signer(NEW, (OLD,)))]
    assert [(s.version, s.mode) for s in signals] == [(1, "snapshot"), (2, "delta"), (3, "delta"), (4, "snapshot")]
    assert await redis.hget(keys.track("r:u"), "kid") == key_id(NEW)
    result = await agent.before_model_call(held)
    assert [(inj.version, inj.mode) for inj in result.add] == [(4, "snapshot")]
    assert agent.subscription.refused == 0
    assert agent.window.rebuild(held | {inj.id for inj in result.add}) == _doc(4)

    await _write(url, redis, keys, range(5, 6), **rotated)
    signals = [s for _, s in await read_signals(redis, keys, "r:u", signer=Signer(NEW, (OLD,)))]
    assert signals[-1].mode == "delta"  # the key is the lane's again: deltas as usual

    new_only = Subscription(redis, keys, "r:u", signer=Signer(NEW))
    assert [(m.signal.version, m.value) for m in await new_only.bootstrap()][-1] == (5, _doc(5))
    assert new_only.refused == 0
    old_only = Subscription(redis, keys, "r:u", signer=Signer(OLD))
    items = await old_only.bootstrap()
    assert [m.signal.version for m in items] == [1, 2, 3] and old_only.refused == 2


async def test_a_worker_without_a_key_after_one_with_a_key_snapshots(
        redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Signing turned off (or on) is a change of key too: the next signal is a snapshot."""
    url = redis_server.url
    await _write(url, redis, keys, range(1, 3), signing_key=OLD.decode())
    await _write(url, redis, keys, range(3, 4))
    signals = [s for _, s in await read_signals(redis, keys, "r:u")]
    assert [(s.version, s.mode) for s in signals] == [(1, "snapshot"), (2, "delta"), (3, "snapshot")]
    assert await redis.hget(keys.track("r:u"), "kid") == ""
