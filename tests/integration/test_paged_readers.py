"""The paged readers the UI uses give what the full reads give: a lane's signal pages and any
version's text (signals.streams.history), and a thread's timeline pages
(signals.streams.timeline) against ``DeliveryLog.read`` and ``view_at``. Real Redis, a real
worker; the agent loop's model is scripted."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.errors import CorruptDataError
from signals.streams.deliveries import DeliveryLog
from signals.streams.history import signal_page, version_texts
from signals.streams.keys import Keys
from signals.streams.replay import materialise, read_signals
from signals.streams.store import WorkingMemoryStore
from signals.streams.timeline import timeline_page
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


def _doc(i: int) -> str:
    return "# Notes\n" + "\n".join(f"- fact {j}: {'changed ' * (j == i % 7)}line {j}" for j in range(8)) + f"\n- n {i}"


async def _fill(redis: Redis, keys: Keys, server: RedisServer, calls: int, trim_every: int) -> AgentWorkingMemory:
    """``calls`` model calls of a scripted loop, one write before each (two before every fifth);
    the loop trims its window every ``trim_every`` calls (re-injections)."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    held: list[str] = []
    async with running_workers(server.url, keys, retain_signals=100_000, snapshot_every=8):
        for i in range(calls):
            await store.replace("u", _doc(i))
            if i % 5 == 4:
                await store.replace("u", _doc(i) + "\n- extra")
            await wait_caught_up(redis, keys)
            result = await agent.before_model_call(held)
            held = [m for m in held if m not in result.drop] + [inj.id for inj in result.add]
            if i % trim_every == trim_every - 1:
                held = held[-1:]  # the loop's window dropped the rest (the snapshot among them)
    return agent


async def test_signal_pages_and_version_texts_match_the_full_read(redis_server: RedisServer, redis: Redis,
                                                                 keys: Keys) -> None:
    """Pages newest first cover the stream once, in order; every version's text (any range)
    equals the one ``materialise`` rebuilds from the whole history."""
    await _fill(redis, keys, redis_server, 40, 1_000)
    signals = await read_signals(redis, keys, "r:u")
    full = {m.signal.version: m.value for m in materialise(signals)}
    seen, before = [], None
    while True:
        page = await signal_page(redis, keys, "r:u", before=before, count=7)
        seen += [e.entry_id for e in page.entries]
        if page.older is None:
            break
        before = page.older
    assert seen == [entry_id for entry_id, _ in reversed(signals)]
    assert page.length == len(signals)
    for low, high in ((1, 1), (1, len(full)), (9, 9), (17, 30), (len(full), len(full))):
        texts = await version_texts(redis, keys, "r:u", low, high)
        assert {v: m.value for v, m in texts.items()} == {v: full[v] for v in range(low, high + 1)}
    assert await version_texts(redis, keys, "r:u", len(full) + 1, len(full) + 3) == {}


async def test_timeline_pages_match_the_delivery_log(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Every record of ``DeliveryLog.read`` is on exactly one page, in order; each call's version
    and text are ``view_at``'s for its step and window, and re-injections name what they dropped."""
    await _fill(redis, keys, redis_server, 30, 6)
    log = DeliveryLog(redis, keys)
    records = await log.read("t1")
    assert {r.reason for r in records} == {"bootstrap", "new", "reinject"}
    calls, before = [], None
    while True:
        page = await timeline_page(redis, keys, "t1", before=before, count=4)
        calls += list(page.calls)
        if page.older is None:
            break
        before = page.older
    assert [d for call in reversed(calls) for _, d in call.records] == records
    for call in calls:
        view = await log.view_at("t1", call.step, window=call.window)
        assert view is not None
        assert (call.version, call.text) == (view.version, view.text)
        reinjected = any(d.reason == "reinject" for _, d in call.records)
        assert (call.dropped is not None) == reinjected
    newest = await timeline_page(redis, keys, "t1", count=4)
    assert newest.read < len(records) // 2  # back to the window's last snapshot, not the whole log


async def test_a_forged_record_is_named(redis: Redis, keys: Keys) -> None:
    """A record that is not one of the thread's is refused with its entry id, as the log's other readers do."""
    entry_id = await redis.xadd(keys.deliveries("t9"), {"e": '{"threadId": "other"}'})
    with pytest.raises(CorruptDataError, match=entry_id):
        await timeline_page(redis, keys, "t9")
    await anyio.lowlevel.checkpoint()
