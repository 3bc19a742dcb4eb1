"""The MCP server's signal watch on a real redis-server with a real worker: what it notifies, and
what it refuses to let stop it (a key of another type, entries that are not signals)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from signals.errors import VerifyError
from signals.streams.keys import Keys
from signals.streams.replay import decode_entry, xrange_entries
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers
from workers.mcp.fanout import SignalWatch, TooManyLanesError
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    async def __call__(self, lane: str, version: int) -> None:
        self.events.append((lane, version))

    async def wait_for(self, lane: str, version: int, limit_s: float = 10.0) -> None:
        with anyio.fail_after(limit_s):
            while not any(e[0] == lane and e[1] >= version for e in self.events):
                await anyio.sleep(0.01)


@pytest.fixture
async def watch(redis: Redis, keys: Keys, redis_server: RedisServer) -> AsyncIterator[tuple[SignalWatch, Seen]]:
    seen = Seen()
    w = SignalWatch(redis, keys, seen, block_ms=3000, probe_interval_s=0.2, max_lanes=3)
    async with running_workers(redis_server.url, keys, 1), anyio.create_task_group() as tg:
        await tg.start(w.run)
        yield w, seen
        tg.cancel_scope.cancel()


async def test_a_lane_joining_a_blocked_read_is_notified_at_once(redis: Redis, keys: Keys,
                                                                 watch: tuple[SignalWatch, Seen]) -> None:
    """The read blocks for 3 s; a lane that joins meanwhile is tailed from then on, well before that."""
    w, seen = watch
    store = WorkingMemoryStore(redis, keys=keys)
    await w.acquire("r:a")
    await anyio.sleep(0.2)  # the read is now blocked on r:a alone
    await w.acquire("r:b")
    await store.replace("b", "# b")
    await seen.wait_for("r:b", 1, limit_s=3.0)
    await store.replace("a", "# a")
    await seen.wait_for("r:a", 1)
    w.release("r:a")
    await store.replace("a", "# a2")
    await store.replace("b", "# b2")
    await seen.wait_for("r:b", 2)
    assert ("r:a", 2) not in seen.events, "a released lane is not notified"


async def test_a_key_of_another_type_is_parked_and_the_others_keep_going(redis: Redis, keys: Keys,
                                                                         watch: tuple[SignalWatch, Seen]) -> None:
    """r:bad's signal key holds a string: parked; r:good is notified; once the key is a stream again, r:bad is."""
    w, seen = watch
    store = WorkingMemoryStore(redis, keys=keys)
    await redis.set(keys.signals("r:bad"), "not a stream")
    await w.acquire("r:bad")
    await w.acquire("r:good")
    await store.replace("good", "# good")
    await seen.wait_for("r:good", 1)
    await redis.delete(keys.signals("r:bad"))
    await store.replace("bad", "# bad")  # the worker makes its stream
    await seen.wait_for("r:bad", 1)


async def test_entries_that_are_not_signals_are_not_notified(redis: Redis, keys: Keys,
                                                             watch: tuple[SignalWatch, Seen]) -> None:
    """A hand-made entry in a watched stream (not JSON, another lane's signal) notifies nothing; a real one does
    (the worker's maintenance may re-snapshot the lane past the foreign entries: that snapshot is one)."""
    w, seen = watch
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("x", "# x")
    await store.replace("y", "# y")
    with anyio.fail_after(10):  # both signalled before r:x is watched: its signal 1 is not news
        while not (await redis.xlen(keys.signals("r:x")) and await redis.xlen(keys.signals("r:y"))):
            await anyio.sleep(0.02)
    await w.acquire("r:x")
    other = await redis.xrange(keys.signals("r:y"))
    await redis.xadd(keys.signals("r:x"), {"e": "junk"})
    fields: dict[Any, Any] = dict(other[0][1] or {})
    await redis.xadd(keys.signals("r:x"), fields)  # r:y's signal, copied
    await anyio.sleep(0.5)
    genuine = set()
    for entry in await xrange_entries(redis, keys.signals("r:x")):
        with contextlib.suppress(VerifyError):
            genuine.add(("r:x", decode_entry("r:x", entry).version))
    assert set(seen.events) <= genuine - {("r:x", 1)}, (seen.events, genuine)
    newest = max((v for lane, v in seen.events if lane == "r:x"), default=1)
    await store.replace("x", "# x2")
    await seen.wait_for("r:x", newest + 1)


async def test_the_number_of_lanes_watched_is_bounded(watch: tuple[SignalWatch, Seen]) -> None:
    """Past max_lanes a new lane is refused; an extra reference to a watched one is not a new lane."""
    w, _ = watch
    for lane in ("r:1", "r:2", "r:3"):
        await w.acquire(lane)
    await w.acquire("r:1")
    with pytest.raises(TooManyLanesError):
        await w.acquire("r:4")
    w.release("r:1")
    assert w.lanes == 3
    w.release("r:1")
    await w.acquire("r:4")
    assert w.lanes == 3
